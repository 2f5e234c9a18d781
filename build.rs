//! Compiles `proto/` into Rust with protox (a pure-Rust protobuf compiler), so
//! building needs no `protoc` on the machine; and turns the hooks of the WIT
//! world `registrar-policy` into `for_each_hook!`, the one hook table the host
//! is built from (`src/policy/hook.rs`). `plugins/sdk/build.rs` reads the same
//! world, so adding a hook to the WIT adds it everywhere.

use std::fmt::Write as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["pluginregistration/api.proto", "csi/csi.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(files)?;

    println!("cargo:rerun-if-changed=wit/policy.wit");
    println!("cargo:rerun-if-changed=wit/world_hooks.rs");
    let wit = std::fs::read_to_string("wit/policy.wit")?;
    let hooks = world_hooks(&wit, "registrar-policy")
        .ok_or("wit/policy.wit has no `world registrar-policy { ... }`")?;
    let mut rows = String::new();
    for hook in &hooks {
        let camel: String = hook
            .split('-')
            .map(|w| w[..1].to_uppercase() + &w[1..])
            .collect();
        writeln!(
            rows,
            "            ({camel}, \"{hook}\", {}),",
            hook.replace('-', "_")
        )?;
    }
    let code = format!(
        "/// Calls `$m!` with `(Variant, \"wit-name\", wit_module)` for every hook of\n\
         /// the WIT world `registrar-policy`, in the world's order.\n\
         macro_rules! for_each_hook {{\n    ($m:ident) => {{\n        $m! {{\n{rows}        }}\n    }};\n}}\n"
    );
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("hooks.rs"), code)?;
    Ok(())
}

include!("wit/world_hooks.rs");
