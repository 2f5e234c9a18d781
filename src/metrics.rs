//! Prometheus metrics, served as text on `/metrics`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotificationLabels {
    registered: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    hook: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    plugin: String,
    hook: String,
}

/// Every metric the registrar exports.
pub struct Metrics {
    registry: Mutex<Registry>,
    registered: Gauge,
    notifications: Family<NotificationLabels, Counter>,
    get_info: Counter,
    socket_creations: Family<ReasonLabels, Counter>,
    driver_reconnects: Counter,
    notify_timeouts: Counter,
    policy_reloads: Family<OutcomeLabels, Counter>,
    plugin_calls: Family<CallLabels, Counter>,
    plugin_call_seconds: Family<HookLabels, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("csi_registrar");
        let registered = Gauge::default();
        registry.register(
            "registered",
            "1 when the kubelet's last verdict accepted the registration, 0 otherwise",
            registered.clone(),
        );
        let notifications = Family::<NotificationLabels, Counter>::default();
        registry.register(
            "kubelet_notifications",
            "NotifyRegistrationStatus calls received from the kubelet",
            notifications.clone(),
        );
        let get_info = Counter::default();
        registry.register(
            "get_info_requests",
            "GetInfo calls answered",
            get_info.clone(),
        );
        let socket_creations = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "registration_socket_creations",
            "Registration sockets created, by reason (startup, retry, deleted, replaced, driver-changed, policy-reloaded, notify-timeout)",
            socket_creations.clone(),
        );
        let driver_reconnects = Counter::default();
        registry.register(
            "driver_reconnects",
            "Times the CSI driver came back after being unreachable",
            driver_reconnects.clone(),
        );
        let notify_timeouts = Counter::default();
        registry.register(
            "notify_timeouts",
            "Times the kubelet's GetInfo was not followed by NotifyRegistrationStatus within --notify-timeout (the socket is then created again)",
            notify_timeouts.clone(),
        );
        let policy_reloads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "policy_reloads",
            "Policy reloads (SIGHUP) by outcome (ok, error)",
            policy_reloads.clone(),
        );
        let plugin_calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "plugin_calls",
            "Policy plugin calls by plugin, hook and outcome (ok, error, timeout, trap, invalid)",
            plugin_calls.clone(),
        );
        let plugin_call_seconds = Family::<HookLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0])
        });
        registry.register(
            "plugin_call_duration_seconds",
            "Duration of policy plugin calls (fresh instance plus call)",
            plugin_call_seconds.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            registered,
            notifications,
            get_info,
            socket_creations,
            driver_reconnects,
            notify_timeouts,
            policy_reloads,
            plugin_calls,
            plugin_call_seconds,
        }
    }

    /// `csi_registrar_registered`: the kubelet's last verdict.
    pub fn set_registered(&self, registered: bool) {
        self.registered.set(i64::from(registered));
    }

    /// Counts a `NotifyRegistrationStatus`.
    pub fn kubelet_notification(&self, registered: bool) {
        self.notifications
            .get_or_create(&NotificationLabels {
                registered: registered.to_string(),
            })
            .inc();
    }

    /// Counts a `GetInfo`.
    pub fn get_info(&self) {
        self.get_info.inc();
    }

    /// Counts a registration socket created, by reason.
    pub fn socket_created(&self, reason: &str) {
        self.socket_creations
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts the driver coming back.
    pub fn driver_reconnected(&self) {
        self.driver_reconnects.inc();
    }

    /// Counts a GetInfo left without a NotifyRegistrationStatus.
    pub fn notify_timed_out(&self) {
        self.notify_timeouts.inc();
    }

    /// Counts a reload, by outcome.
    pub fn policy_reload(&self, ok: bool) {
        self.policy_reloads
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "error" }.to_owned(),
            })
            .inc();
    }

    /// Counts a plugin call and records its duration.
    pub fn plugin_call(&self, plugin: &str, hook: &str, outcome: &str, took: Duration) {
        self.plugin_calls
            .get_or_create(&CallLabels {
                plugin: plugin.to_owned(),
                hook: hook.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.plugin_call_seconds
            .get_or_create(&HookLabels {
                plugin: plugin.to_owned(),
                hook: hook.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing to a String cannot fail");
        out
    }
}
