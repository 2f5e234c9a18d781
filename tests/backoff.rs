//! A failure policy's retry back-off is a deadline the registrar's loop
//! selects on, so every other event is heard during it (see `registrar.rs`
//! for the rule). The back-off here is a minute; the tests give each event
//! the usual 20 s of patience, so an event that waited for the back-off to
//! end would fail them.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use csi_node_driver_registrar::Config;
use csi_node_driver_registrar::testing::{
    Context, DefaultPolicy, DriverSpec, Failure, FailureAction, FakeDriver, FakeKubelet, Harness,
    KubeletBehaviour, Policy, PolicyError, Registration, Snapshot,
};

const DRIVER: &str = "hostpath.csi.k8s.io";
const MINUTE: Duration = Duration::from_secs(60);

/// Upstream's registration (with `suffix` on the name), and a retry after
/// `delay` on every refusal.
struct Retry {
    delay: Duration,
    suffix: &'static str,
}

impl Policy for Retry {
    fn registration(&self, ctx: &Context) -> Result<Registration, PolicyError> {
        let mut r = DefaultPolicy.registration(ctx)?;
        r.name.push_str(self.suffix);
        Ok(r)
    }

    fn on_failure(&self, _: &Context, _: &Failure) -> Result<FailureAction, PolicyError> {
        Ok(FailureAction::Retry(self.delay))
    }
}

fn backing_off(s: &Snapshot) -> bool {
    s.retry_in.is_some() && !s.serving
}

/// The kubelet refuses the registration on the socket for `name`.
async fn refuse(sb: &Sandbox, name: &str) {
    let kubelet = FakeKubelet::new(KubeletBehaviour {
        refuse_with: Some("error updating CSINode object: conflict".into()),
    });
    let attempt = kubelet.register(&sb.socket(name)).await.unwrap();
    assert!(!attempt.sent.plugin_registered);
}

/// The registrar with `config` and `policy`, its socket refused once by the
/// kubelet, and now backing off for a minute.
async fn refused(sb: &Sandbox, config: Config, policy: Retry) -> (FakeDriver, Harness) {
    let name = format!("{DRIVER}{}", policy.suffix);
    let driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut registrar = Harness::with_policy(config, Arc::new(policy));
    registrar.wait_for("the socket", serving(&name)).await;
    refuse(sb, &name).await;
    let s = registrar.wait_for("the back-off", backing_off).await;
    assert_eq!(s.retry_in, Some(MINUTE));
    assert!(!sb.socket(&name).exists(), "the socket is closed meanwhile");
    (driver, registrar)
}

/// A configuration whose policy file names no plugins: a reload gives the
/// built-in policy.
fn with_empty_policy_file(sb: &Sandbox) -> Config {
    let file = write_policy(sb.dir.path(), "# no plugins: the built-in policy\n");
    Config {
        policy_config: Some(file),
        ..sb.config()
    }
}

const RETRY_A_MINUTE: Retry = Retry {
    delay: MINUTE,
    suffix: "",
};

#[tokio::test]
async fn a_back_off_ends_by_re_creating_the_socket() {
    let sb = Sandbox::new();
    let policy = Retry {
        delay: Duration::from_millis(100),
        suffix: "",
    };
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut registrar = Harness::with_policy(sb.config(), Arc::new(policy));
    registrar.wait_for("the socket", serving(DRIVER)).await;
    refuse(&sb, DRIVER).await;
    let s = registrar
        .wait_for("the socket again", |s| s.serving && s.sockets_created == 2)
        .await;
    assert_eq!(s.retry_in, None);
    assert!(
        registrar
            .metrics()
            .contains("csi_registrar_registration_socket_creations_total{reason=\"retry\"} 1"),
        "{}",
        registrar.metrics()
    );
    assert!(kubelet_registers(&sb.socket(DRIVER)).await);
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn a_driver_change_during_a_back_off_is_registered_at_once() {
    let sb = Sandbox::new();
    let (driver, mut registrar) = refused(&sb, sb.config(), RETRY_A_MINUTE).await;
    driver.stop().await;
    let _new = FakeDriver::start(&sb.csi, DriverSpec::named("nfs.csi.k8s.io"))
        .await
        .unwrap();
    let s = registrar
        .wait_for("the new driver's socket", serving("nfs.csi.k8s.io"))
        .await;
    assert_eq!(s.retry_in, None, "the back-off ended");
    assert!(kubelet_registers(&sb.socket("nfs.csi.k8s.io")).await);
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn a_driver_back_unchanged_during_a_back_off_leaves_it_running() {
    let sb = Sandbox::new();
    let (driver, mut registrar) = refused(&sb, sb.config(), RETRY_A_MINUTE).await;
    driver.stop().await;
    registrar
        .wait_for("the driver noticed gone", |s| s.driver_down.is_some())
        .await;
    let _same = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let s = registrar
        .wait_for("the driver noticed back", |s| s.driver_down.is_none())
        .await;
    assert!(backing_off(&s), "the refusal still stands: {s:#?}");
    assert!(!sb.socket(DRIVER).exists());
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn a_reload_that_changes_the_registration_ends_a_back_off_at_once() {
    let sb = Sandbox::new();
    let policy = Retry {
        delay: MINUTE,
        suffix: "-pool-a",
    };
    let (_driver, mut registrar) = refused(&sb, with_empty_policy_file(&sb), policy).await;

    // SIGHUP: the file names no plugins, so the built-in policy decides the
    // driver's own name, and that registration is offered now.
    registrar.reload();
    let s = registrar
        .wait_for("the reloaded registration's socket", serving(DRIVER))
        .await;
    assert_eq!(s.retry_in, None);
    assert!(
        registrar
            .metrics()
            .contains("csi_registrar_policy_reloads_total{outcome=\"ok\"} 1"),
        "{}",
        registrar.metrics()
    );
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn a_reload_that_keeps_the_registration_leaves_a_back_off_running() {
    let sb = Sandbox::new();
    let (_driver, mut registrar) = refused(&sb, with_empty_policy_file(&sb), RETRY_A_MINUTE).await;
    registrar.reload();
    let s = registrar.wait_for("the reload", |s| s.reloads == 1).await;
    assert!(backing_off(&s), "the refusal still stands: {s:#?}");
    assert!(
        registrar
            .metrics()
            .contains("csi_registrar_policy_reloads_total{outcome=\"ok\"} 1"),
        "{}",
        registrar.metrics()
    );
    assert_eq!(registrar.stop().await.unwrap(), 0);
}
