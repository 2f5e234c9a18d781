//! The registration's state, with one owner: what is advertised and on which
//! socket, the kubelet's last verdict, and whether the driver answers.
//!
//! [`State`] is created by the wiring and written only by the registrar's loop,
//! one method per transition; each transition moves its metrics too. The HTTP
//! server, the registration service and the tests read it through a
//! [`watch::Receiver`], so a reader never takes a lock the loop holds and can
//! wait for the next change.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::policy::Registration;

/// A decided registration and the path of its socket (whether a socket of
/// ours is there right now is for whoever looks to find out, as `/healthz` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// What `GetInfo` answers.
    pub registration: Registration,
    /// `<registry>/<name>-reg.sock`.
    pub socket: PathBuf,
}

/// The kubelet's side of the registration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Kubelet {
    /// No socket yet: the driver has not answered.
    #[default]
    WaitingForDriver,
    /// Our socket is up; the kubelet has not given its verdict on it yet.
    Waiting,
    /// The kubelet accepted the registration.
    Registered,
    /// The kubelet refused it; the failure policy is handling it.
    Refused(String),
}

/// Where the registration stands, as `/readyz` reports it: the kubelet's
/// side, unless the driver is away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The CSI driver has not answered yet.
    WaitingForDriver,
    /// The socket is up; the kubelet has not given its verdict yet.
    WaitingForKubelet,
    /// The kubelet accepted the registration.
    Registered,
    /// The kubelet refused; the failure policy is handling it.
    Rejected(String),
    /// The driver stopped answering after it was registered.
    DriverUnreachable(String),
    /// The kubelet asked for the plugin's info and then gave no verdict within
    /// `--notify-timeout`; the socket was created again so that it registers anew.
    NotifyMissed(NotifyMissed),
}

/// GetInfo calls the kubelet did not follow with a `NotifyRegistrationStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotifyMissed {
    /// How many in a row, since the last verdict.
    pub times: u32,
    /// How long the last one was waited for.
    pub waited: Duration,
}

/// One reading of the state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// What is advertised, once decided.
    pub published: Option<Published>,
    /// Whether our socket is at [`Published::socket`]: false while a newer
    /// instance holds the path, during a retry back-off, and after the end.
    pub serving: bool,
    /// The kubelet's side.
    pub kubelet: Kubelet,
    /// `Some(error)` while the driver does not answer.
    pub driver_down: Option<String>,
    /// Registration sockets created so far (a re-creation counts).
    pub sockets_created: u64,
    /// The retry delay, while a back-off runs.
    pub retry_in: Option<Duration>,
    /// Policy reloads handled so far, whether they took or not.
    pub reloads: u64,
    /// Set while the kubelet's verdicts are missing (cleared by the next one).
    pub notify_missed: Option<NotifyMissed>,
}

impl Snapshot {
    /// The phase `/readyz` reports.
    pub fn phase(&self) -> Phase {
        if let Some(e) = &self.driver_down {
            return Phase::DriverUnreachable(e.clone());
        }
        match &self.kubelet {
            Kubelet::WaitingForDriver => Phase::WaitingForDriver,
            Kubelet::Waiting => match self.notify_missed {
                Some(missed) => Phase::NotifyMissed(missed),
                None => Phase::WaitingForKubelet,
            },
            Kubelet::Registered => Phase::Registered,
            Kubelet::Refused(e) => Phase::Rejected(e.clone()),
        }
    }

    /// The registration advertised, once decided.
    pub fn registration(&self) -> Option<&Registration> {
        self.published.as_ref().map(|p| &p.registration)
    }
}

/// A reader's view of the state: the current snapshot, and its changes.
pub type StateReader = watch::Receiver<Snapshot>;

/// The one writer of the registration's state.
pub struct State {
    tx: watch::Sender<Snapshot>,
    metrics: Arc<Metrics>,
}

impl State {
    /// A state waiting for the driver, whose transitions move `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        State {
            tx: watch::Sender::new(Snapshot::default()),
            metrics,
        }
    }

    /// A reader, for the HTTP server, the registration service and tests.
    pub fn reader(&self) -> StateReader {
        self.tx.subscribe()
    }

    /// The current snapshot.
    pub fn get(&self) -> Snapshot {
        self.tx.borrow().clone()
    }

    /// The metrics the transitions move.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Our socket for `registration` is at `socket`, waiting for the kubelet.
    pub(crate) fn serving(&self, registration: &Registration, socket: PathBuf, reason: &str) {
        self.metrics.socket_created(reason);
        self.tx.send_modify(|s| {
            s.published = Some(Published {
                registration: registration.clone(),
                socket,
            });
            s.serving = true;
            s.kubelet = Kubelet::Waiting;
            s.sockets_created += 1;
            s.retry_in = None;
        });
    }

    /// A newer instance's socket holds the path: we advertise nothing there.
    pub(crate) fn standing_by(&self, registration: &Registration, socket: PathBuf) {
        self.tx.send_modify(|s| {
            s.published = Some(Published {
                registration: registration.clone(),
                socket,
            });
            s.serving = false;
            s.retry_in = None;
        });
    }

    /// The kubelet's verdict on the registration.
    pub(crate) fn verdict(&self, registered: bool, error: &str) {
        self.metrics.set_registered(registered);
        self.tx.send_modify(|s| {
            s.kubelet = if registered {
                Kubelet::Registered
            } else {
                Kubelet::Refused(error.to_owned())
            };
            s.notify_missed = None;
        });
    }

    /// The kubelet's verdict did not come within `waited` of its GetInfo, for
    /// the `times`th time in a row.
    pub(crate) fn notify_missed(&self, times: u32, waited: Duration) {
        self.metrics.notify_timed_out();
        self.tx
            .send_modify(|s| s.notify_missed = Some(NotifyMissed { times, waited }));
    }

    /// The socket was removed for a retry, to be created again after `delay`.
    pub(crate) fn backing_off(&self, delay: Duration) {
        self.tx.send_modify(|s| {
            s.serving = false;
            s.retry_in = Some(delay);
        });
    }

    /// The socket is gone for good (the registrar is stopping).
    pub(crate) fn closed(&self) {
        self.tx.send_modify(|s| s.serving = false);
    }

    /// A policy reload was handled; `ok`: the new policy is in force.
    pub(crate) fn reloaded(&self, ok: bool) {
        self.metrics.policy_reload(ok);
        self.tx.send_modify(|s| s.reloads += 1);
    }

    /// The driver answered. Returns whether it had been down.
    pub(crate) fn driver_answers(&self) -> bool {
        let was_down = self.tx.send_if_modified(|s| s.driver_down.take().is_some());
        if was_down {
            self.metrics.driver_reconnected();
        }
        was_down
    }

    /// The driver did not answer. Returns whether it was down already.
    pub(crate) fn driver_down(&self, error: String) -> bool {
        let mut was_down = false;
        self.tx
            .send_modify(|s| was_down = s.driver_down.replace(error).is_some());
        was_down
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration() -> Registration {
        Registration {
            name: "d".into(),
            endpoint: "/e".into(),
            supported_versions: vec!["1.0.0".into()],
        }
    }

    #[test]
    fn the_phase_follows_the_transitions_and_the_metrics_move_with_them() {
        let metrics = Arc::new(Metrics::new());
        let state = State::new(metrics.clone());
        let reader = state.reader();
        assert_eq!(reader.borrow().phase(), Phase::WaitingForDriver);
        state.serving(&registration(), "/r/d-reg.sock".into(), "startup");
        assert_eq!(reader.borrow().phase(), Phase::WaitingForKubelet);
        state.verdict(true, "");
        assert_eq!(reader.borrow().phase(), Phase::Registered);
        assert!(metrics.encode().contains("csi_registrar_registered 1"));
        assert!(!state.driver_down("gone".into()));
        assert!(state.driver_down("still gone".into()));
        assert_eq!(
            reader.borrow().phase(),
            Phase::DriverUnreachable("still gone".into())
        );
        assert!(state.driver_answers());
        assert!(!state.driver_answers());
        assert!(
            metrics
                .encode()
                .contains("csi_registrar_driver_reconnects_total 1")
        );
        state.verdict(false, "no");
        assert_eq!(reader.borrow().phase(), Phase::Rejected("no".into()));
        assert!(metrics.encode().contains("csi_registrar_registered 0"));
        state.backing_off(Duration::from_secs(30));
        let s = reader.borrow().clone();
        assert!(!s.serving);
        assert_eq!(s.retry_in, Some(Duration::from_secs(30)));
        assert_eq!(s.sockets_created, 1);
    }
}
