//! Turns `wit/policy.wit` into the `export_policy!` macro. The hooks are those
//! of the WIT world `registrar-policy`, the one declaration the host's hook
//! table comes from too.
//!
//! `wit_bindgen::generate!` must run in the plugin's own crate (its export
//! macros cannot be combined across crates), and it only takes the WIT as a
//! string literal. So this script writes a macro with one arm per set of hooks,
//! each calling `generate!` with the package text inline and a world that
//! exports exactly those hooks. The WIT is read, never copied by hand.

use std::fmt::Write as _;

include!("../../wit/world_hooks.rs");

fn main() {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let wit_path = manifest.join("../../wit/policy.wit");
    println!("cargo:rerun-if-changed={}", wit_path.display());
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../../wit/world_hooks.rs").display()
    );
    let mut wit = std::fs::read_to_string(&wit_path).expect("reading wit/policy.wit");
    let names = world_hooks(&wit, "registrar-policy")
        .expect("wit/policy.wit has no world registrar-policy");
    let hooks: Vec<(String, &str)> = names
        .iter()
        .map(|h| (h.replace('-', "_"), h.as_str()))
        .collect();
    let order = hooks
        .iter()
        .map(|h| h.0.as_str())
        .collect::<Vec<_>>()
        .join(", ");

    let mut arms = String::new();
    for mask in 1u32..(1 << hooks.len()) {
        let chosen: Vec<_> = hooks
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, h)| h)
            .collect();
        let world = format!(
            "sdk-{}",
            chosen.iter().map(|h| h.1).collect::<Vec<_>>().join("-")
        );
        writeln!(
            wit,
            "\nworld {world} {{\n  import host-log;\n  import registrar-info;\n  export plugin;"
        )
        .unwrap();
        for (_, iface) in &chosen {
            writeln!(wit, "  export {iface};").unwrap();
        }
        wit.push_str("}\n");

        let idents = chosen
            .iter()
            .map(|h| h.0.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let glue: String = chosen
            .iter()
            .map(|h| format!("$crate::__glue_{}!($ty);\n", h.0))
            .collect();
        write!(
            arms,
            "    ($ty:ident: {idents}) => {{\n        $crate::__bindings!(\"{world}\");\n        $crate::__glue_plugin!($ty);\n        {glue}        __csi_registrar_policy_bindings::export!($ty with_types_in __csi_registrar_policy_bindings);\n    }};\n"
        )
        .unwrap();
    }

    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let code = format!(
        r####"
/// Exports a type as a policy plugin implementing the listed hooks.
///
/// List the hooks in this order: {order}; implement [`Plugin`] and the
/// trait of each listed hook.
///
/// ```ignore
/// csi_registrar_policy::export_policy!(MyPolicy: driver_name, endpoint);
/// ```
#[macro_export]
macro_rules! export_policy {{
{arms}    ($ty:ident: $($other:tt)*) => {{
        compile_error!("export_policy!: list one or more hooks, in this order: {order}");
    }};
}}

#[doc(hidden)]
#[macro_export]
macro_rules! __bindings {{
    ($world:tt) => {{
        #[allow(dead_code, clippy::all)]
        mod __csi_registrar_policy_bindings {{
            $crate::__rt::wit_bindgen::generate!({{
                inline: r###"{wit}"###,
                world: $world,
                runtime_path: "csi_registrar_policy::__rt::wit_bindgen::rt",
                generate_all,
            }});
        }}
    }};
}}
"####
    );
    std::fs::write(out.join("export_macro.rs"), code).unwrap();
}
