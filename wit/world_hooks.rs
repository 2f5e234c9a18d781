// Included by `build.rs` and `plugins/sdk/build.rs`: the hook list of both the
// host and the SDK is read from the WIT, here, and nowhere else.

/// The interfaces a world of the WIT exports, in order, except `plugin`
/// (every plugin's own): the hooks. `None` if the world is not there.
fn world_hooks(wit: &str, world: &str) -> Option<Vec<String>> {
    let start = wit.find(&format!("world {world} {{"))?;
    let body = &wit[start..start + wit[start..].find('}')?];
    Some(
        body.lines()
            .filter_map(|l| l.trim().strip_prefix("export ")?.strip_suffix(';'))
            .filter(|name| *name != "plugin")
            .map(str::to_owned)
            .collect(),
    )
}
