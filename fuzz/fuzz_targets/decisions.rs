//! The rules every decision passes: whatever a driver or a plugin answers, an
//! accepted name keeps the socket inside the registry, an accepted endpoint is
//! a usable socket path, and an accepted version list has a 1.x the kubelet
//! would pick.
#![no_main]

use std::path::Path;

use csi_node_driver_registrar::testing::socket_path;
use csi_node_driver_registrar::testing::validate::{self, KubeletVersion, UNIX_PATH_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, String, Vec<String>)| {
    let (name, endpoint, versions) = input;

    if validate::driver_name(&name).is_ok() {
        let path = socket_path(Path::new("/registry"), &name);
        assert_eq!(path.parent(), Some(Path::new("/registry")), "{name:?} escapes");
        assert!(name.len() <= 63 && !name.starts_with('.') && !name.contains('/'));
    }

    if validate::endpoint(&endpoint).is_ok() {
        assert!(endpoint.starts_with('/') && endpoint.len() < UNIX_PATH_MAX && !endpoint.contains('\0'));
    }

    if let Ok(highest) = validate::highest_supported_version(&versions) {
        assert_eq!(highest.major(), 1);
        assert!(versions.iter().any(|v| KubeletVersion::parse(v).as_ref() == Some(&highest)));
    }
    for v in &versions {
        if let Some(parsed) = KubeletVersion::parse(v) {
            // What the registrar prints parses back to the same version.
            assert_eq!(KubeletVersion::parse(&parsed.to_string()), Some(parsed));
        }
    }
});
