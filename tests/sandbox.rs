//! The sandbox against hostile plugins: components built without the SDK (WAT)
//! and the misbehave fixture, each trying one way out of its limits.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use csi_node_driver_registrar::testing::{Chain, Policy};

/// A policy plugin written by hand: `info` and `validate-settings`, and a core
/// module whose extra memories and tables are given by `extra` (WAT fields).
fn hand_written(dir: &Path, name: &str, extra: &str) -> std::path::PathBuf {
    let wat = format!(
        r#"(component
  (core module $m
    (memory (export "memory") 1)
    {extra}
    (data (memory 0) (i32.const 16) "hand")
    (global $heap (mut i32) (i32.const 4096))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      global.get $heap
      local.set $p
      global.get $heap
      local.get 3
      i32.add
      global.set $heap
      local.get $p)
    (func (export "info") (result i32)
      (i32.store (i32.const 100) (i32.const 16))
      (i32.store (i32.const 104) (i32.const 4))
      (i32.store (i32.const 108) (i32.const 16))
      (i32.store (i32.const 112) (i32.const 4))
      i32.const 100)
    (func (export "validate-settings") (param i32 i32) (result i32)
      (i32.store8 (i32.const 200) (i32.const 0))
      i32.const 200))
  (core instance $i (instantiate $m))
  (type $info (record (field "name" string) (field "version" string)))
  (func $info (result $info)
    (canon lift (core func $i "info") (memory (core memory $i "memory"))))
  (func $validate (param "settings-json" string) (result (result (error string)))
    (canon lift (core func $i "validate-settings") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
  (component $plugin
    (type $info' (record (field "name" string) (field "version" string)))
    (import "plugin-info-in" (type $t (eq $info')))
    (import "info-in" (func $f (result $t)))
    (import "validate-in" (func $v (param "settings-json" string) (result (result (error string)))))
    (export $e "plugin-info" (type $t))
    (export "info" (func $f) (func (result $e)))
    (export "validate-settings" (func $v)))
  (instance $p (instantiate $plugin
    (with "plugin-info-in" (type $info))
    (with "info-in" (func $info))
    (with "validate-in" (func $validate))))
  (export "csi-registrar:policy/plugin@0.1.0" (instance $p)))"#
    );
    let path = dir.join(name);
    std::fs::write(&path, wat::parse_str(&wat).unwrap()).unwrap();
    path
}

#[test]
fn a_hand_written_plugin_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = hand_written(dir.path(), "plain.wasm", "");
    let chain = load(dir.path(), &plugin_entry("plain", &path, "")).unwrap();
    assert_eq!(chain.plugin_ids(), ["plain"]);
}

fn misbehave(action: &str, extra: &str) -> String {
    plugin_entry(
        "m",
        &plugin("misbehave"),
        &format!("{extra}\n[plugin.settings]\ndo = \"{action}\"\n"),
    )
}

// Class 1: deadlines that nothing outlives.

/// `std::thread::sleep` in a guest is a WASI monotonic-clock wait: a host
/// call, where epoch interruption alone never fires. The plugin sleeps for a
/// minute; every hook must end at its deadline of 100 ms instead.
#[test]
fn a_plugin_sleeping_in_a_host_call_is_stopped_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    for hook in ["driver-name", "versions", "endpoint"] {
        let chain = load(
            dir.path(),
            &misbehave("sleep", &format!("hooks = [\"{hook}\"]\ntimeout_ms = 100")),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let err = chain.registration(&ctx()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("policy plugin \"m\", hook {hook}: deadline of 100ms exceeded")
        );
        // Not a timing goal: the sleep is 60 s, and a call that waited for it
        // would take that long.
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
    let chain = load(
        dir.path(),
        &misbehave("sleep", "hooks = [\"failure\"]\ntimeout_ms = 100"),
    )
    .unwrap();
    let failure = csi_node_driver_registrar::testing::Failure {
        error: "refused".into(),
        attempt: 1,
        elapsed: std::time::Duration::ZERO,
    };
    let err = chain.on_failure(&ctx(), &failure).unwrap_err().to_string();
    assert_eq!(
        err,
        "policy plugin \"m\", hook failure: deadline of 100ms exceeded"
    );
}

#[test]
fn validate_settings_sleeping_is_stopped_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let err = load(
        dir.path(),
        &misbehave(
            "echo",
            "timeout_ms = 100\n[plugin.settings]\nsleep-in-settings = true",
        )
        .replace("[plugin.settings]\ndo = \"echo\"\n", "do = \"echo\"\n"),
    )
    .unwrap_err();
    assert!(
        err.ends_with("validate-settings failed: deadline of 100ms exceeded"),
        "{err}"
    );
    // Not a timing goal: the sleep is 60 s, and a call that waited for it
    // would take that long (and then trap at the next epoch check).
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// Deadline timers are armed per call: one call's timer firing must not end
/// another call early. Fast calls run while other threads keep hitting their
/// own short deadlines, sleeping and spinning.
#[test]
fn one_calls_deadline_never_ends_another_call() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let chain = |action: &str, timeout_ms: u32| {
        Arc::new(
            load(
                dir.path(),
                &misbehave(
                    action,
                    &format!("hooks = [\"driver-name\"]\ntimeout_ms = {timeout_ms}"),
                ),
            )
            .unwrap(),
        )
    };
    let echo = chain("echo", 999);
    let stop = Arc::new(AtomicBool::new(false));
    let ended = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let disturbers: Vec<_> = [chain("sleep", 100), chain("loop", 100)]
        .into_iter()
        .enumerate()
        .map(|(i, chain)| {
            let (stop, ended) = (stop.clone(), ended.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let err = chain.registration(&ctx()).unwrap_err().to_string();
                    assert!(err.ends_with("deadline of 100ms exceeded"), "{err}");
                    ended[i].fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // At least 300 calls, and until each disturber's deadline fired 20 times.
    let mut round = 0;
    while round < 300 || ended.iter().any(|n| n.load(Ordering::Relaxed) < 20) {
        let name = echo
            .registration(&ctx())
            .unwrap_or_else(|e| panic!("round {round}: {e}"))
            .name;
        assert_eq!(name, "hostpath.csi.k8s.io.node-a1");
        round += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for d in disturbers {
        d.join().unwrap();
    }
}

/// Every call gets a fresh instance: nothing one call leaves in memory or in
/// a static is there for the next, whether its memory slot was cleared by
/// `memset` (the first pages) or given back to the kernel (the rest). Many
/// calls, so that slots are reused, and a second plugin of the same engine
/// in between, so that a slot changes hands.
#[test]
fn no_call_sees_what_an_earlier_call_left() {
    let dir = tempfile::tempdir().unwrap();
    let policy = format!(
        "{}{}",
        misbehave("remember", "hooks = [\"driver-name\"]"),
        &misbehave("remember", "hooks = [\"driver-name\"]").replace("id = \"m\"", "id = \"n\"")
    );
    let chain = load(dir.path(), &policy).unwrap();
    for round in 0..200 {
        assert_eq!(name(&chain), "calls-1.seen-0", "round {round}");
    }
}

/// The driver stand-in, and the registrar binary running with this policy.
async fn registrar_with(
    sb: &Sandbox,
    policy: &str,
) -> (csi_node_driver_registrar::testing::FakeDriver, Process) {
    use csi_node_driver_registrar::testing::{DriverSpec, FakeDriver};
    let driver = FakeDriver::start(&sb.csi, DriverSpec::named("hostpath.csi.k8s.io"))
        .await
        .unwrap();
    let policy = write_policy(sb.dir.path(), policy);
    let registrar = Process::spawn(sb, &[format!("--policy-config={}", policy.display())]);
    (driver, registrar)
}

/// Sends SIGTERM once the plugin says it sleeps; the registrar must exit 0.
async fn sigterm_while_sleeping(mut registrar: Process) -> String {
    assert!(
        registrar.wait_log("misbehave: sleeping").await,
        "{}",
        registrar.log_text()
    );
    registrar.signal(libc::SIGTERM);
    assert_eq!(registrar.exit_code().await, 0, "{}", registrar.log_text());
    registrar.log_text()
}

/// SIGTERM while a plugin call sleeps: the registrar exits 0 at once with its
/// socket removed. Had it waited for the call, the call's timeout would have
/// made the failure policy fail (exit 1), as before this was fixed.
#[tokio::test]
async fn sigterm_during_a_plugin_call_exits_0_and_removes_the_socket() {
    use csi_node_driver_registrar::testing::{FakeKubelet, KubeletBehaviour};
    let sb = Sandbox::new();
    let (_driver, registrar) = registrar_with(
        &sb,
        &misbehave("sleep", "hooks = [\"failure\"]\ntimeout_ms = 999"),
    )
    .await;
    let socket = sb.socket("hostpath.csi.k8s.io");
    assert!(appears(&socket).await, "{}", registrar.log_text());
    let kubelet = FakeKubelet::new(KubeletBehaviour {
        refuse_with: Some("error updating Node object: forbidden".into()),
    });
    kubelet.register(&socket).await.unwrap();
    let log = sigterm_while_sleeping(registrar).await;
    assert!(!socket.exists());
    assert!(!log.contains("Failure policy failed"), "{log}");
}

/// The same during start-up, when the call decides the registration: nothing
/// is left behind.
#[tokio::test]
async fn sigterm_during_a_start_up_plugin_call_exits_0() {
    let sb = Sandbox::new();
    let (_driver, registrar) = registrar_with(
        &sb,
        &misbehave("sleep", "hooks = [\"driver-name\"]\ntimeout_ms = 999"),
    )
    .await;
    sigterm_while_sleeping(registrar).await;
    assert_eq!(std::fs::read_dir(&sb.registry).unwrap().count(), 0);
}

// Class 2: the memory cap is per instance.

#[test]
fn the_memory_cap_covers_every_memory_and_table_of_an_instance() {
    let dir = tempfile::tempdir().unwrap();
    // 31 extra memories of 32 MiB: each under the cap, together 31 times it.
    let many = hand_written(dir.path(), "memories.wasm", &"(memory 512)\n".repeat(31));
    let err = load(
        dir.path(),
        &plugin_entry("many", &many, "memory_limit_mib = 64"),
    )
    .unwrap_err();
    assert!(
        err.contains("memory_limit_mib = 64 is too small for this plugin: starting an instance asked for at least 65 MiB"),
        "{err}"
    );
    // Tables count too (16 bytes an element): 900,000 elements are 13.7 MiB.
    let table = hand_written(dir.path(), "table.wasm", "(table 900000 funcref)");
    let err = load(
        dir.path(),
        &plugin_entry("table", &table, "memory_limit_mib = 8"),
    )
    .unwrap_err();
    assert!(err.contains("asked for at least 14 MiB"), "{err}");
    // A table larger than any instance slot holds is refused at load.
    let table = hand_written(dir.path(), "huge-table.wasm", "(table 10000000 funcref)");
    let err = load(
        dir.path(),
        &plugin_entry("table", &table, "memory_limit_mib = 4096"),
    )
    .unwrap_err();
    assert!(
        err.contains("the component needs more than an instance of the registrar may have: module table does not fit in pooling allocator requirements: table index 0 has a minimum element size of 10000000 which exceeds the limit of 1048576 (an instance may have 64 core instances, 64 memories and 64 tables, a table 1048576 elements, and a memory 4096 MiB, the policy's largest memory_limit_mib rounded up)"),
        "{err}"
    );
    // A memory slot holds the largest cap, rounded up to a power of two: a
    // memory that starts larger than that is refused at load, saying so.
    let wide = hand_written(dir.path(), "wide.wasm", "(memory 1040)");
    let err = load(
        dir.path(),
        &plugin_entry("wide", &wide, "memory_limit_mib = 33"),
    )
    .unwrap_err();
    assert!(
        err.contains(
            "memory has a minimum byte size of 68157440 which exceeds the limit of 0x4000000 bytes"
        ) && err
            .ends_with("and a memory 64 MiB, the policy's largest memory_limit_mib rounded up)"),
        "{err}"
    );
    // Under a cap that holds them all, the same kind of plugin loads.
    let three = hand_written(dir.path(), "three.wasm", &"(memory 512)\n".repeat(3));
    load(
        dir.path(),
        &plugin_entry("three", &three, "memory_limit_mib = 97"),
    )
    .unwrap();
    let err = load(
        dir.path(),
        &plugin_entry("three", &three, "memory_limit_mib = 96"),
    )
    .unwrap_err();
    assert!(err.contains("asked for at least 97 MiB"), "{err}");
}

#[test]
fn a_memory_limit_too_small_to_start_is_refused_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    // 25 pages of 64 KiB, more than 1 MiB. (The example plugins start with
    // less: a 64 KiB stack, data and a heap.)
    let big = hand_written(dir.path(), "big.wasm", "(memory 24)");
    let err = load(dir.path(), &plugin_entry("p", &big, "memory_limit_mib = 1")).unwrap_err();
    assert!(
        err.contains("memory_limit_mib = 1 is too small for this plugin: starting an instance asked for at least 2 MiB")
            && err.ends_with("raise memory_limit_mib"),
        "{err}"
    );
}

// Class 4: what runs is what is pinned, cache or not.

fn entries(cache: &Path) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(cache) {
        Ok(dir) => dir.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Replaces a file by rename, as files are replaced in place: a live component
/// maps its entry, and truncating a mapped file would fault.
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The driver name a chain decides for [`ctx`].
fn name(chain: &Chain) -> String {
    chain.registration(&ctx()).unwrap().name
}

fn suffix_policy(header: &str) -> String {
    format!(
        "{header}{}",
        plugin_entry(
            "p",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-a\""
        )
    )
}

/// Another component's compiled entry copied over the pinned one's: the
/// registrar must run the pinned component, not the copy.
#[test]
fn a_swapped_cache_entry_is_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let header = cached_policy(dir.path(), &cache);
    let pinned = suffix_policy(&header);
    load(dir.path(), &pinned).unwrap();
    let [pinned_entry] = entries(&cache).try_into().unwrap();
    let other = format!("{header}{}", misbehave("echo", "hooks = [\"driver-name\"]"));
    let chain = load(dir.path(), &other).unwrap();
    assert_eq!(name(&chain), "hostpath.csi.k8s.io.node-a1");
    drop(chain);
    let other_entry = entries(&cache)
        .into_iter()
        .find(|e| *e != pinned_entry)
        .unwrap();
    replace(&pinned_entry, &std::fs::read(&other_entry).unwrap());

    let chain = load(dir.path(), &pinned).unwrap();
    assert_eq!(name(&chain), "hostpath.csi.k8s.io-a");
    // ...and the entry was compiled again from the pinned component.
    assert_ne!(
        std::fs::read(&pinned_entry).unwrap(),
        std::fs::read(&other_entry).unwrap()
    );
    drop(chain);
    let chain = load(dir.path(), &pinned).unwrap();
    assert_eq!(name(&chain), "hostpath.csi.k8s.io-a");
}

/// An entry written under another key (another node's, or an attacker's
/// guess) is compiled again; so is one with a byte changed.
#[test]
fn an_entry_under_another_key_or_edited_is_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let header = cached_policy(dir.path(), &cache);
    let pinned = suffix_policy(&header);
    load(dir.path(), &pinned).unwrap();
    let [entry] = entries(&cache).try_into().unwrap();
    let original = std::fs::read(&entry).unwrap();

    std::fs::write(
        dir.path().join("cache.key"),
        "another key of at least thirty-two bytes",
    )
    .unwrap();
    load(dir.path(), &pinned).unwrap();
    let rewritten = std::fs::read(&entry).unwrap();
    assert_ne!(rewritten, original, "the entry is tagged with the new key");

    let mut edited = rewritten.clone();
    let last = edited.len() - 1;
    edited[last] ^= 1;
    replace(&entry, &edited);
    let chain = load(dir.path(), &pinned).unwrap();
    assert_eq!(name(&chain), "hostpath.csi.k8s.io-a");
    assert_eq!(std::fs::read(&entry).unwrap(), rewritten);
}

/// Without a usable key the cache is not used at all: no key file named, a
/// key inside the cache directory, a key too short.
#[test]
fn without_a_usable_key_the_cache_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let no_key = format!("[policy]\ncache_dir = \"{}\"\n", cache.display());
    let chain = load(dir.path(), &suffix_policy(&no_key)).unwrap();
    assert_eq!(name(&chain), "hostpath.csi.k8s.io-a");
    assert!(entries(&cache).is_empty());

    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let inside = cache.join("cache.key");
    std::fs::write(&inside, "0123456789abcdef0123456789abcdef").unwrap();
    let short = dir.path().join("short.key");
    std::fs::write(&short, "too short\n").unwrap();
    for key in [&inside, &short] {
        let header = format!(
            "[policy]\ncache_dir = \"{}\"\ncache_key_file = \"{}\"\n",
            cache.display(),
            key.display()
        );
        load(dir.path(), &suffix_policy(&header)).unwrap();
        assert!(
            entries(&cache)
                .iter()
                .all(|e| e.extension().is_none_or(|x| x != "cwasm")),
            "{key:?}"
        );
    }
}

#[test]
fn the_key_cli_makes_keys_the_registrar_takes() {
    let out = std::process::Command::new(BIN)
        .args(["plugin", "cache-key"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap();
    assert_eq!(key.trim().len(), 64);
    assert!(key.trim().chars().all(|c| c.is_ascii_hexdigit()));
    let again = std::process::Command::new(BIN)
        .args(["plugin", "cache-key"])
        .output()
        .unwrap();
    assert_ne!(again.stdout, key.as_bytes(), "a new key each time");
}

// Class 7: the first line of every error says plugin, hook and cause.

#[test]
fn deep_nesting_in_the_policy_file_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let deep = 1000;
    for (what, line) in [
        ("dotted key", format!("{} = 1", vec!["k"; deep].join("."))),
        (
            "inline tables",
            format!("k = {}1{}", "{ k = ".repeat(deep), " }".repeat(deep)),
        ),
        (
            "arrays",
            format!("k = {}1{}", "[".repeat(deep), "]".repeat(deep)),
        ),
    ] {
        let toml = format!(
            "[policy]\nmin_retry_ms = 10\n\n[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\n[plugin.settings]\n{line}\n"
        );
        let err = load(dir.path(), &toml).unwrap_err();
        let first = err.lines().next().unwrap();
        assert!(
            first.starts_with(&format!(
                "policy file {}, line 8: ",
                dir.path().join("policy.toml").display()
            )),
            "{what}: {first}"
        );
        assert!(first.contains("flatten this line"), "{what}: {first}");
    }
}

/// `demo` reports a registrar that stops at start-up as soon as it stops.
/// (Not a timing goal: it used to wait 30 s for a socket that never came.)
#[tokio::test]
async fn demo_reports_a_start_up_refusal_at_once_naming_plugin_and_hook() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(dir.path(), &misbehave("trap", "hooks = [\"driver-name\"]"));
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        run_binary(&["demo", "--policy", policy.to_str().unwrap()]),
    )
    .await
    .expect("demo still waiting after 20 s");
    let (code, _, err) = out;
    assert_eq!(code, 1, "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("error: the registrar stopped: policy plugin \"m\", hook driver-name: trapped: wasm trap: wasm `unreachable` instruction executed"),
        "{err}"
    );
}

/// The registrar compiles plugins in a child process of its own binary; a
/// component that does not compile is still reported with the compiler's
/// reason, naming the plugin, and a good one still registers.
#[tokio::test]
async fn the_registrar_compiles_in_a_child_and_reports_its_errors() {
    let sb = Sandbox::new();
    // A component header, then a section the validator refuses.
    let broken = sb.dir.path().join("broken.wasm");
    std::fs::write(&broken, b"\0asm\x0d\0\x01\0\x7f\x03abc").unwrap();
    let (driver, mut registrar) = registrar_with(&sb, &plugin_entry("broken", &broken, "")).await;
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(
        log.contains("policy plugin \\\"broken\\\"")
            && log.contains("not a valid WebAssembly component: "),
        "{log}"
    );
    driver.stop().await;

    let (_driver, registrar) = registrar_with(
        &sb,
        &plugin_entry(
            "p",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-a\"",
        ),
    )
    .await;
    assert!(
        appears(&sb.socket("hostpath.csi.k8s.io-a")).await,
        "{}",
        registrar.log_text()
    );
    assert_eq!(registrar.stop().await, 0);
}

// The registrar's one runtime: plugins' WASI clocks run on it.

/// The registrar runs one current-thread runtime and calls plugins on its
/// blocking pool; a plugin's wait on a WASI clock is driven by that runtime
/// while its thread awaits the call. 100 calls, each with a 5 ms WASI sleep
/// under a 999 ms deadline: every one answers (a clock nobody drives would
/// end each at its deadline instead).
#[tokio::test(flavor = "current_thread")]
async fn a_plugin_sleeping_on_a_wasi_clock_is_woken_by_the_registrars_own_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_policy(
        dir.path(),
        &misbehave("nap", "hooks = [\"driver-name\"]\ntimeout_ms = 999"),
    );
    let metrics = Arc::new(csi_node_driver_registrar::testing::Metrics::new());
    let policy = csi_node_driver_registrar::testing::wasm::load_policy(&file, &metrics)
        .await
        .unwrap();
    for i in 0..100 {
        let policy = policy.clone();
        let decided = tokio::task::spawn_blocking(move || policy.registration(&ctx()))
            .await
            .unwrap();
        match decided {
            Ok(r) => assert_eq!(r.name, ctx().driver_name, "call {i}"),
            Err(e) => panic!("call {i}: {e}"),
        }
    }
}
