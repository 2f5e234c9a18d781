//! The host's bindings, generated from the WIT world `registrar-policy`.

wasmtime::component::bindgen!({
    path: "wit",
    world: "registrar-policy",
    exports: { default: async },
});

/// The WIT package this host implements.
pub(crate) const WIT_PACKAGE: &str = "csi-registrar:policy";
/// Its version.
pub(crate) const WIT_VERSION: &str = "0.1.1";
