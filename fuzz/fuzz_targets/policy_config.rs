//! The policy file parser: any text either parses into a configuration that
//! respects every documented bound, or fails with a message naming the file.
#![no_main]

use std::path::Path;

use csi_node_driver_registrar::testing::{
    MAX_MEMORY_LIMIT_MIB, MAX_TIMEOUT_MS, OciReference, PluginSource, PolicyFile,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match PolicyFile::from_toml_str(text, Path::new("/fuzz/policy.toml")) {
        Ok(cfg) => {
            assert!(cfg.min_retry <= cfg.max_retry);
            let mut ids = std::collections::HashSet::new();
            for p in &cfg.plugins {
                assert!(ids.insert(p.id.clone()), "duplicate id {}", p.id);
                let ms = p.timeout.as_millis();
                assert!((1..=u128::from(MAX_TIMEOUT_MS)).contains(&ms), "timeout {ms}");
                let mib = p.memory_limit_bytes >> 20;
                assert!((1..=MAX_MEMORY_LIMIT_MIB).contains(&mib), "memory {mib}");
                match &p.source {
                    PluginSource::File { path, .. } => assert!(path.is_absolute(), "{path:?}"),
                    // An OCI plugin is pinned by a well-formed manifest digest:
                    // written out, its reference reads back, pinned, the same.
                    PluginSource::Oci(oci) => {
                        let text = oci.reference.to_string();
                        let again = OciReference::parse_pinned(&text).expect("pinned");
                        assert_eq!(again, oci.reference, "{text}");
                        assert!(oci.store.is_absolute(), "{:?}", oci.store);
                    }
                }
                serde_json::from_str::<serde_json::Value>(&p.settings_json).expect("settings are JSON");
            }
        }
        Err(e) => assert!(e.to_string().contains("/fuzz/policy.toml"), "{e}"),
    }
});
