//! Loading a plugin: errors in the author's terms (file, line, fix), what is
//! not a policy component (WAT written here), and the compiled cache.

mod common;

use common::*;
use csi_node_driver_registrar::testing::Policy;

#[test]
fn load_errors_speak_the_authors_language() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A wrong pin.
    let pool = plugin("pool-suffix");
    let toml = format!(
        "[[plugin]]\nid = \"p\"\npath = \"{}\"\nsha256 = \"{}\"\n[plugin.settings]\nsuffix = \"-a\"\n",
        pool.display(),
        "00".repeat(32)
    );
    let err = load(d, &toml).unwrap_err();
    assert!(
        err.contains(&format!(
            "sha256 is {}, but the policy file pins 0000",
            sha256_hex(&pool)
        )),
        "{err}"
    );
    assert!(
        err.contains("ship the pinned file or update the pin"),
        "{err}"
    );

    // Settings the plugin refuses, and settings of the wrong type.
    let err = load(
        d,
        &plugin_entry("p", &pool, "[plugin.settings]\nsuffix = \"a/b\""),
    )
    .unwrap_err();
    assert!(
        err.contains("the plugin refused its settings: suffix \"a/b\" contains '/'"),
        "{err}"
    );
    let err = load(
        d,
        &plugin_entry("p", &pool, "[plugin.settings]\nsufix = \"-a\""),
    )
    .unwrap_err();
    assert!(
        err.contains("invalid settings for pool-suffix: unknown field `sufix`"),
        "{err}"
    );

    // A hooks filter naming a hook the component does not export.
    let err = load(
        d,
        &plugin_entry(
            "p",
            &pool,
            "hooks = [\"failure\"]\n[plugin.settings]\nsuffix = \"-a\"",
        ),
    )
    .unwrap_err();
    assert!(
        err.contains(
            "hooks lists \"failure\" but the component does not export csi-registrar:policy/failure@0.1.1; it exports driver-name"
        ),
        "{err}"
    );

    // A missing file.
    let err = load(
        d,
        &format!(
            "[[plugin]]\nid = \"p\"\npath = \"{}/nope.wasm\"\nallow_unpinned = true\n",
            d.display()
        ),
    )
    .unwrap_err();
    assert!(
        err.contains("nope.wasm, policy file ")
            && err.contains("policy.toml line 3): cannot read the file: No such file"),
        "{err}"
    );
}

#[test]
fn a_component_for_another_wit_version_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_plugin(
        dir.path(),
        "future.wasm",
        r#"(component
             (instance $i)
             (export "csi-registrar:policy/plugin@0.2.0" (instance $i)))"#,
    );
    let err = load(dir.path(), &plugin_entry("future", &path, "")).unwrap_err();
    assert!(
        err.contains("it exports csi-registrar:policy/plugin@0.2.0, but this registrar implements csi-registrar:policy@0.1.1"),
        "{err}"
    );
    assert!(err.contains("rebuild the plugin against the wit/"), "{err}");
}

#[test]
fn a_component_without_the_plugin_interface_is_not_a_policy() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_plugin(dir.path(), "other.wasm", "(component)");
    let err = load(dir.path(), &plugin_entry("other", &path, "")).unwrap_err();
    assert!(
        err.contains("does not export csi-registrar:policy/plugin@0.1.1"),
        "{err}"
    );
}

#[test]
fn a_core_module_or_random_bytes_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let core = wat_plugin(dir.path(), "core.wasm", "(module)");
    let err = load(dir.path(), &plugin_entry("core", &core, "")).unwrap_err();
    assert!(
        err.contains(
            "this is a core WebAssembly module, not a component: build for the wasm32-wasip2 target"
        ),
        "{err}"
    );
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"#!/bin/sh\necho hi\n").unwrap();
    let err = load(dir.path(), &plugin_entry("junk", &junk, "")).unwrap_err();
    assert!(err.contains("not a WebAssembly binary"), "{err}");
}

#[test]
fn compiled_components_are_cached_and_a_bad_cache_entry_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let toml = format!(
        "{}{}",
        cached_policy(dir.path(), &cache),
        plugin_entry(
            "p",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-a\""
        )
    );
    load(dir.path(), &toml).unwrap();
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].extension().is_some_and(|e| e == "cwasm"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
        0o700
    );

    // A second load uses the entry as it is.
    let before = std::fs::metadata(&entries[0]).unwrap().modified().unwrap();
    let chain = load(dir.path(), &toml).unwrap();
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io-a"
    );
    assert_eq!(
        std::fs::metadata(&entries[0]).unwrap().modified().unwrap(),
        before
    );

    // A corrupt entry is discarded and rewritten, never fatal. (Replaced by
    // rename, as the registrar itself writes: a live component maps the old
    // file, and truncating a mapped file in place would fault.)
    drop(chain);
    let garbage = cache.join("garbage.tmp");
    std::fs::write(&garbage, b"garbage").unwrap();
    std::fs::rename(&garbage, &entries[0]).unwrap();
    let chain = load(dir.path(), &toml).unwrap();
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io-a"
    );
    assert_ne!(std::fs::read(&entries[0]).unwrap(), b"garbage");
}

#[test]
fn a_cache_dir_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let toml = format!(
        "{}{}",
        cached_policy(dir.path(), &cache),
        plugin_entry(
            "p",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-a\""
        )
    );
    let chain = load(dir.path(), &toml).unwrap();
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io-a"
    );
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "nothing written or read there"
    );
}
