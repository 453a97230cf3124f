//! Where everything the kernel reports goes: ring-buffer records and task events, handed on in
//! time order, a bounded amount at a time.
//!
//! A drain takes at most [`DRAIN_BUDGET`] of records: when they come faster than they are
//! processed, the session still looks at its stop conditions between drains (the kernel counts
//! what its ring could not hold as lost). The last drain, once the kernel side is paused, has
//! [`END_BUDGET`]; what is left then is thrown away and counted as lost.
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::{
    address_space::TaskEvent,
    clock,
    decode::RecordKind,
    kernel::{ring::RingReader, task_events::TaskEventReader},
};

/// The longest one drain of the ring takes.
const DRAIN_BUDGET: Duration = Duration::from_millis(50);
/// The longest the last drain takes.
const END_BUDGET: Duration = Duration::from_secs(2);

/// What takes the records and task events of a drain.
pub trait Sink {
    fn task_event(&mut self, event: TaskEvent);
    fn record(&mut self, record: &[u8]);
    /// The drain is over: nothing taken before `now_ns` is still to come.
    fn drained(&mut self, now_ns: u64);
}

/// Where records come from: the kernel's ring (tests bring their own).
pub trait Records {
    /// Waits until records may be there.
    async fn ready(&mut self) -> Result<()>;
    /// Hands the records there now to `consume` until `deadline`; returns whether some were
    /// left for lack of time.
    fn drain(&mut self, deadline: Instant, consume: impl FnMut(&[u8])) -> bool;
    /// Throws away the records there now; returns how many.
    fn discard(&mut self) -> u64;
}

/// Where task events come from: the kernel's perf events (tests bring their own).
pub trait TaskEvents {
    /// Hands the events up to `horizon_ns` to `handle`, in time order, a bounded number at a
    /// time; returns whether some may have been left.
    fn drain(&mut self, horizon_ns: u64, handle: impl FnMut(TaskEvent)) -> bool;
}

impl Records for RingReader {
    async fn ready(&mut self) -> Result<()> {
        RingReader::ready(self).await.context("cannot read the ring buffer")
    }

    fn drain(&mut self, deadline: Instant, consume: impl FnMut(&[u8])) -> bool {
        RingReader::drain(self, deadline, consume)
    }

    fn discard(&mut self) -> u64 {
        RingReader::discard(self)
    }
}

impl TaskEvents for TaskEventReader {
    fn drain(&mut self, horizon_ns: u64, handle: impl FnMut(TaskEvent)) -> bool {
        TaskEventReader::drain(self, horizon_ns, handle)
    }
}

pub struct Intake<R = RingReader, T = TaskEventReader> {
    ring: R,
    task_events: T,
    kind: RecordKind,
    /// Records taken after the task events were read: their mappings may still be on the way.
    later: Vec<Vec<u8>>,
    /// The last drain left work behind: the next one starts at once.
    behind: bool,
    /// Records thrown away at the end, for lack of time.
    discarded: u64,
}

impl<R: Records, T: TaskEvents> Intake<R, T> {
    pub fn new(ring: R, task_events: T, kind: RecordKind) -> Self {
        Self { ring, task_events, kind, later: Vec::new(), behind: false, discarded: 0 }
    }

    /// Waits for the ring (its drain tick, or a wakeup), unless the last drain left work.
    pub async fn ready(&mut self) -> Result<()> {
        if self.behind {
            // Let the stop conditions and the status line have their turn.
            tokio::task::yield_now().await;
            return Ok(());
        }
        self.ring.ready().await
    }

    /// One drain, of at most [`DRAIN_BUDGET`].
    pub fn drain(&mut self, sink: &mut impl Sink) {
        self.drain_until(Instant::now() + DRAIN_BUDGET, sink);
    }

    /// Hands `sink` the pending task events and records, in time order, until `deadline`: a
    /// record must find the mappings made before it. Task events are read up to a horizon;
    /// records taken after it wait for the next drain, whose task events will cover them.
    fn drain_until(&mut self, deadline: Instant, sink: &mut impl Sink) {
        let Self { ring, task_events, kind, later, behind, .. } = self;
        let horizon = clock::monotonic_ns();
        let events_left = task_events.drain(horizon, |event| sink.task_event(event));
        for record in later.drain(..) {
            sink.record(&record);
        }
        let records_left = ring.drain(deadline, |record| match kind.time_ns(record) {
            Some(time_ns) if time_ns > horizon => later.push(record.to_vec()),
            _ => sink.record(record),
        });
        *behind = events_left || records_left;
        sink.drained(horizon);
    }

    /// The last drain, once nothing new comes: until nothing is held back, within
    /// [`END_BUDGET`]; what is left then is thrown away and counted.
    pub fn drain_all(&mut self, sink: &mut impl Sink) {
        let deadline = Instant::now() + END_BUDGET;
        loop {
            self.drain_until(deadline, sink);
            let done = !self.behind && self.later.is_empty();
            if done || Instant::now() >= deadline {
                break;
            }
        }
        self.discarded += self.ring.discard() + self.later.len() as u64;
        self.later.clear();
    }

    /// The last drain left records or task events for lack of time.
    pub fn behind(&self) -> bool {
        self.behind
    }

    /// Records thrown away at the end for lack of time.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring that refills faster than anything reads it.
    struct Endless {
        record: Vec<u8>,
        handed: u64,
    }

    impl Records for Endless {
        async fn ready(&mut self) -> Result<()> {
            Ok(())
        }

        fn drain(&mut self, deadline: Instant, mut consume: impl FnMut(&[u8])) -> bool {
            loop {
                consume(&self.record);
                self.handed += 1;
                if self.handed.is_multiple_of(64) && Instant::now() >= deadline {
                    return true;
                }
            }
        }

        fn discard(&mut self) -> u64 {
            1000
        }
    }

    struct NoEvents;

    impl TaskEvents for NoEvents {
        fn drain(&mut self, _: u64, _: impl FnMut(TaskEvent)) -> bool {
            false
        }
    }

    /// Counts what it is handed, slowly.
    #[derive(Default)]
    struct Slow {
        records: u64,
        drains: u64,
    }

    impl Sink for Slow {
        fn task_event(&mut self, _: TaskEvent) {}
        fn record(&mut self, _: &[u8]) {
            self.records += 1;
            std::thread::sleep(Duration::from_micros(50));
        }
        fn drained(&mut self, _: u64) {
            self.drains += 1;
        }
    }

    fn endless() -> Intake<Endless, NoEvents> {
        // A record of the distant past: never held back for its task events.
        let record = vec![0; 64];
        Intake::new(Endless { record, handed: 0 }, NoEvents, RecordKind::Sample)
    }

    #[test]
    fn a_drain_of_a_ring_that_never_empties_ends_within_its_budget() {
        let mut intake = endless();
        let mut sink = Slow::default();
        let started = Instant::now();
        intake.drain(&mut sink);
        let took = started.elapsed();
        assert!(took < DRAIN_BUDGET * 3, "took {took:?}");
        assert!(sink.records > 0 && intake.behind, "the drain says it left work behind");
        assert_eq!(sink.drains, 1);
    }

    #[test]
    fn the_last_drain_ends_too_and_counts_what_it_threw_away() {
        let mut intake = endless();
        let mut sink = Slow::default();
        let started = Instant::now();
        intake.drain_all(&mut sink);
        assert!(started.elapsed() < END_BUDGET * 2, "took {:?}", started.elapsed());
        assert_eq!(intake.discarded(), 1000);
    }

    #[tokio::test]
    async fn behind_means_ready_at_once() {
        let mut intake = endless();
        intake.drain(&mut Slow::default());
        tokio::time::timeout(Duration::from_millis(100), intake.ready()).await.unwrap().unwrap();
    }
}
