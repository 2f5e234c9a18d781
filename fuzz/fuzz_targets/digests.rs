//! A digest from a manifest, an index, a signature or a kept record is
//! parsed before it names a file in the store: whatever the text, an
//! accepted digest names exactly `blobs/sha256/<64 lowercase hex>`, never a
//! path, and reads back as itself.
#![no_main]

use csi_node_driver_registrar::testing::oci::store_name;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(name) = store_name(text) {
        assert_eq!(name.len(), 64, "{text:?}");
        assert!(
            name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{text:?} -> {name:?}"
        );
        assert_eq!(text, format!("sha256:{name}"), "only the canonical form is accepted");
    }
});
