//! A manifest or an index, whatever a registry sends, is parsed into types
//! before anything is fetched: it never panics, and what it says to fetch
//! next is a list of blobs that each name exactly `blobs/sha256/<64 lowercase
//! hex>` in the store, at most `MAX_LAYERS` of them, and, for an image's
//! layers, no more than `pull_max_mib` together.
//!
//! The first byte chooses the case: even, a wasm artefact (no `oci_path`);
//! odd, a container image with `oci_path = "/plugin.wasm"`. The rest is the
//! manifest.
#![no_main]

use csi_node_driver_registrar::testing::oci::{MAX_LAYERS, planned_blobs};
use libfuzzer_sys::fuzz_target;

/// `pull_max_mib` of the fuzzed pulls: 1 MiB.
const MAX: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&case, manifest)) = data.split_first() else {
        return;
    };
    let path_in_image = (case % 2 == 1).then_some("/plugin.wasm");
    let Ok(blobs) = planned_blobs(manifest, path_in_image, MAX) else {
        return;
    };
    assert!(!blobs.is_empty() && blobs.len() <= MAX_LAYERS, "{blobs:?}");
    for (name, _) in &blobs {
        assert_eq!(name.len(), 64, "{name:?}");
        assert!(
            name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{name:?}"
        );
    }
    if path_in_image.is_some() && blobs.len() > 1 {
        let total = blobs.iter().fold(0u64, |t, (_, size)| t.saturating_add(*size));
        assert!(total <= MAX, "{total} bytes planned: {blobs:?}");
    }
});
