//! The deadlines of plugin calls, fired by one thread per engine.
//!
//! A call arms its deadline here and disarms it when it ends. At a deadline
//! the watchdog bumps the engine's epoch (guest code then traps in the
//! store's epoch callback) and wakes the call's future (a call waiting in a
//! host function is then dropped).
//!
//! A call costs a lock and a map insert, and wakes the thread only when its
//! deadline is earlier than the one the thread sleeps towards. Calls made one
//! after another, as the registrar makes them, each arm a deadline later than
//! the last, so the thread wakes at most once per timeout rather than twice
//! per call (a timer task spawned on a runtime and aborted cost two futex
//! wakes and a context switch each time). With nothing armed, the thread
//! sleeps without a timeout: an idle registrar has no wake-ups.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::task::AtomicWaker;
use wasmtime::EngineWeak;

/// One thread that fires deadlines. Dropping it stops the thread.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    pending: Mutex<Pending>,
    changed: Condvar,
}

#[derive(Default)]
struct Pending {
    next_id: u64,
    armed: BTreeMap<(Instant, u64), Armed>,
    /// When the thread wakes by itself (`None`: it waits for a signal).
    wakes_at: Option<Instant>,
    stop: bool,
}

struct Armed {
    engine: EngineWeak,
    fired: Arc<Fired>,
}

/// Set at the deadline; the call's future waits on it.
#[derive(Default)]
struct Fired {
    flag: AtomicBool,
    waker: AtomicWaker,
}

impl Watchdog {
    pub(crate) fn new() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            changed: Condvar::new(),
        });
        std::thread::Builder::new()
            .name("wasm-deadlines".into())
            .spawn({
                let shared = shared.clone();
                move || shared.run()
            })?;
        Ok(Watchdog { shared })
    }

    /// Arms `deadline` for a call on `engine`, until the guard is dropped.
    pub(crate) fn arm(&self, deadline: Instant, engine: EngineWeak) -> Deadline {
        let fired = Arc::new(Fired::default());
        let mut pending = self.shared.lock();
        let id = pending.next_id;
        pending.next_id += 1;
        pending.armed.insert(
            (deadline, id),
            Armed {
                engine,
                fired: fired.clone(),
            },
        );
        if pending.wakes_at.is_none_or(|at| deadline < at) {
            self.shared.changed.notify_one();
        }
        Deadline {
            shared: self.shared.clone(),
            key: (deadline, id),
            fired,
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // Nothing that holds the lock can panic half-way; a poisoned lock's
        // data is whole.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut pending = self.lock();
        loop {
            if pending.stop {
                return;
            }
            let now = Instant::now();
            while let Some(entry) = pending.armed.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let armed = entry.remove();
                armed.fired.flag.store(true, Ordering::Release);
                armed.fired.waker.wake();
                if let Some(engine) = armed.engine.upgrade() {
                    engine.increment_epoch();
                }
            }
            pending.wakes_at = pending.armed.keys().next().map(|(at, _)| *at);
            pending = match pending.wakes_at {
                None => self
                    .changed
                    .wait(pending)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.changed
                        .wait_timeout(pending, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// An armed deadline: a future that completes when it fires. Dropping it
/// disarms it.
pub(crate) struct Deadline {
    shared: Arc<Shared>,
    key: (Instant, u64),
    fired: Arc<Fired>,
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.flag.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        self.fired.waker.register(cx.waker());
        if self.fired.flag.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // The thread may keep sleeping towards this deadline; it then finds
        // nothing due and sleeps on. Waking it here would cost what arming
        // saves.
        self.shared.lock().armed.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn engine() -> wasmtime::Engine {
        let mut cfg = wasmtime::Config::new();
        cfg.epoch_interruption(true);
        wasmtime::Engine::new(&cfg).unwrap()
    }

    #[test]
    fn a_deadline_fires_once_due_and_not_before() {
        let dog = Watchdog::new().unwrap();
        let engine = engine();
        let start = Instant::now();
        let deadline = dog.arm(start + Duration::from_millis(30), engine.weak());
        futures_executor::block_on(deadline);
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn an_earlier_deadline_armed_later_fires_first() {
        // The thread sleeps towards the late one; arming the early one must
        // wake it. Repeated: the order of arming and sleeping varies.
        let dog = Watchdog::new().unwrap();
        let engine = engine();
        for round in 0..200 {
            let late = dog.arm(Instant::now() + Duration::from_secs(600), engine.weak());
            let early = dog.arm(Instant::now() + Duration::from_millis(1), engine.weak());
            futures_executor::block_on(early);
            assert!(!late.fired.flag.load(Ordering::Acquire), "round {round}");
        }
    }

    #[test]
    fn a_disarmed_deadline_never_fires() {
        let dog = Watchdog::new().unwrap();
        let engine = engine();
        let fired = {
            let d = dog.arm(Instant::now() + Duration::from_millis(5), engine.weak());
            d.fired.clone()
        };
        // A later deadline firing proves the thread went past the first one.
        futures_executor::block_on(
            dog.arm(Instant::now() + Duration::from_millis(20), engine.weak()),
        );
        assert!(!fired.flag.load(Ordering::Acquire));
    }
}
