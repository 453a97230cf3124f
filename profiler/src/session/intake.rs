//! Where everything the kernel reports goes: ring-buffer records and task events, handed on in
//! time order, a bounded amount at a time.
//!
//! A drain takes at most [`DRAIN_BUDGET`] of records: when they come faster than they are
//! processed, the session still looks at its stop conditions between drains (the kernel counts
//! what its ring could not hold as lost). The last drain, once the kernel side is paused, has
//! [`END_BUDGET`]; what is left then is thrown away and counted as lost.
use std::{
    ops::ControlFlow,
    time::{Duration, Instant},
};

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
pub(super) trait Sink {
    fn task_event(&mut self, event: TaskEvent);
    /// The drain's task events are in, its records still to come: what the events taught is
    /// acted on (runtimes' images found in what processes mapped). `Break` when the kernel must
    /// hear of it before any record is walked: the drain ends there, and the next one, which
    /// starts at once, takes the records.
    fn events_applied(&mut self) -> ControlFlow<()>;
    /// Takes a record, unless `pause` allows holding it back because what it taught must reach
    /// the kernel first (`Break`): a runtime found in its process is walked by the kernel only
    /// once told, and walking the record itself can take milliseconds (its files read for the
    /// first time). The drain ends there; the record is handed again first thing in the next,
    /// which starts once the kernel has heard.
    fn record(&mut self, record: &[u8], pause: Pause) -> ControlFlow<()>;
    /// The drain is over: nothing taken before `now_ns` is still to come (but records other
    /// CPUs took a few microseconds apart, and off-CPU spans, whose time is their start).
    fn drained(&mut self, now_ns: u64);
}

/// Where records come from: the kernel's ring (tests bring their own).
pub(super) trait Records {
    /// Waits until records may be there, or `interval` has passed since the last wait.
    async fn ready(&mut self, interval: Duration) -> Result<()>;
    /// Hands the records there now to `consume` until `out_of_time` (asked every so many
    /// records) or `consume` says so; returns whether it stopped before the last.
    fn drain(
        &mut self,
        out_of_time: impl FnMut() -> bool,
        consume: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> bool;
    /// Throws away the records there now; returns how many.
    fn discard(&mut self) -> u64;
}

/// Where the intake reads the time its budgets are counted in (tests bring their own).
pub(super) trait Clock {
    fn now(&self) -> Instant;
}

/// The monotonic clock.
pub(super) struct Monotonic;

impl Clock for Monotonic {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Where task events come from: the kernel's perf events (tests bring their own).
pub(super) trait TaskEvents {
    /// Hands the events up to `horizon_ns` to `handle`, in time order, a bounded number at a
    /// time; returns whether some may have been left.
    fn drain(&mut self, horizon_ns: u64, handle: impl FnMut(TaskEvent)) -> bool;
}

impl Records for RingReader {
    async fn ready(&mut self, interval: Duration) -> Result<()> {
        RingReader::ready(self, interval).await.context("cannot read the ring buffer")
    }

    fn drain(
        &mut self,
        out_of_time: impl FnMut() -> bool,
        consume: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> bool {
        RingReader::drain(self, out_of_time, consume)
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

/// Whether a sink may hold a record back until the kernel has heard what its look found (the
/// drain then ends there).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pause {
    ForTheKernel,
    /// The last drain (the kernel side paused), and records handed again.
    Never,
}

pub(super) struct Intake<R = RingReader, T = TaskEventReader, C = Monotonic> {
    ring: R,
    task_events: T,
    clock: C,
    kind: RecordKind,
    /// Records taken after the task events were read: their mappings may still be on the way.
    later: Vec<Vec<u8>>,
    /// The last drain left work behind: the next one starts at once.
    behind: bool,
    /// The last drain ended at its task events, for the kernel: this one takes its records
    /// whatever its events teach (a storm of processes each starting a runtime must not keep
    /// everyone's records waiting).
    ended_for_events: bool,
    /// Records thrown away at the end, for lack of time.
    discarded: u64,
}

impl<R: Records, T: TaskEvents, C: Clock> Intake<R, T, C> {
    pub(super) fn new(ring: R, task_events: T, clock: C, kind: RecordKind) -> Self {
        Self {
            ring,
            task_events,
            clock,
            kind,
            later: Vec::new(),
            behind: false,
            ended_for_events: false,
            discarded: 0,
        }
    }

    /// Waits for the ring (`interval` since the last wait, or a wakeup), unless the last drain
    /// left work.
    pub(super) async fn ready(&mut self, interval: Duration) -> Result<()> {
        if self.behind {
            // Let the stop conditions and the status line have their turn.
            tokio::task::yield_now().await;
            return Ok(());
        }
        self.ring.ready(interval).await
    }

    /// One drain, of at most [`DRAIN_BUDGET`], ended early when the kernel must hear something.
    pub(super) fn drain(&mut self, sink: &mut impl Sink) {
        self.drain_until(self.clock.now() + DRAIN_BUDGET, Pause::ForTheKernel, sink);
    }

    /// Hands `sink` the pending task events and records, in time order, until `deadline`: a
    /// record must find the mappings made before it. Task events are read up to a horizon;
    /// records taken after it wait for the next drain, whose task events will cover them.
    fn drain_until(&mut self, deadline: Instant, pause: Pause, sink: &mut impl Sink) {
        let Self { ring, task_events, clock, kind, later, behind, ended_for_events, .. } = self;
        let horizon = clock::monotonic_ns();
        let events_left = task_events.drain(horizon, |event| sink.task_event(event));
        let told = sink.events_applied().is_break();
        *ended_for_events = told && pause == Pause::ForTheKernel && !*ended_for_events;
        if *ended_for_events {
            *behind = true;
            return;
        }
        // Held back for the kernel or taken after the last horizon: none holds anything back
        // any more (a record held was looked at already).
        for record in later.drain(..) {
            let _ = sink.record(&record, Pause::Never);
        }
        let out_of_time = || clock.now() >= deadline;
        let mut handed_ns = 0;
        let records_left = ring.drain(out_of_time, |record| {
            match kind.time_ns(record) {
                Some(time_ns) if time_ns > horizon => later.push(record.to_vec()),
                time_ns => {
                    if sink.record(record, pause).is_break() {
                        // Older than any taken after the horizon: first in line.
                        later.insert(0, record.to_vec());
                        return ControlFlow::Break(());
                    }
                    handed_ns = handed_ns.max(time_ns.unwrap_or(0));
                }
            }
            ControlFlow::Continue(())
        });
        *behind = events_left || records_left;
        // A drain that stopped early leaves records taken after the last one it handed over
        // (the ring holds them about in the order they were taken), not after the horizon.
        sink.drained(if records_left { handed_ns } else { horizon });
    }

    /// The last drain, once nothing new comes: until nothing is held back, within
    /// [`END_BUDGET`]; what is left then is thrown away and counted.
    pub(super) fn drain_all(&mut self, sink: &mut impl Sink) {
        let deadline = self.clock.now() + END_BUDGET;
        loop {
            // The kernel side is paused: what it would be told no longer matters.
            self.drain_until(deadline, Pause::Never, sink);
            let done = !self.behind && self.later.is_empty();
            if done || self.clock.now() >= deadline {
                break;
            }
        }
        self.discarded += self.ring.discard() + self.later.len() as u64;
        self.later.clear();
    }

    /// The last drain left records or task events for lack of time.
    pub(super) fn behind(&self) -> bool {
        self.behind
    }

    /// Records thrown away at the end for lack of time.
    pub(super) fn discarded(&self) -> u64 {
        self.discarded
    }
}

#[cfg(test)]
mod tests {
    use std::{
        cell::Cell,
        pin::pin,
        rc::Rc,
        task::{Context, Waker},
    };

    use super::*;

    /// A clock that moves only when told.
    #[derive(Clone)]
    struct Manual(Rc<Cell<Instant>>);

    impl Manual {
        fn new() -> Self {
            Self(Rc::new(Cell::new(Instant::now())))
        }

        fn advance(&self, by: Duration) {
            self.0.set(self.0.get() + by);
        }
    }

    impl Clock for Manual {
        fn now(&self) -> Instant {
            self.0.get()
        }
    }

    /// Records looked at between two questions to the clock, as the kernel's ring does.
    const ASKS_EVERY: u64 = 64;

    /// A ring that refills faster than anything reads it, and never wakes its reader.
    struct Endless {
        record: Vec<u8>,
        handed: u64,
        /// Each record taken at its rank (1, 2...) in nanoseconds, rather than as `record` says.
        ranked: bool,
        /// The rank of a record taken long after anything else (past every drain's horizon).
        late_rank: Option<u64>,
    }

    /// Where a sample record says when it was taken.
    const TIME_AT: usize = std::mem::offset_of!(profiler_common::SampleHeader, time_ns);
    /// When [`Endless::late_rank`]'s record was taken.
    const LATE_NS: u64 = u64::MAX / 2;

    impl Records for Endless {
        async fn ready(&mut self, _: Duration) -> Result<()> {
            std::future::pending().await
        }

        fn drain(
            &mut self,
            mut out_of_time: impl FnMut() -> bool,
            mut consume: impl FnMut(&[u8]) -> ControlFlow<()>,
        ) -> bool {
            loop {
                assert!(self.handed < 1_000_000, "the drain does not end");
                self.handed += 1;
                if self.ranked {
                    let time_ns = if self.late_rank == Some(self.handed) { LATE_NS } else { self.handed };
                    self.record[TIME_AT..TIME_AT + 8].copy_from_slice(&time_ns.to_ne_bytes());
                }
                if consume(&self.record).is_break() {
                    return true;
                }
                if self.handed.is_multiple_of(ASKS_EVERY) && out_of_time() {
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

    /// What each record costs, on the manual clock.
    const RECORD_COST: Duration = Duration::from_micros(50);

    /// Counts what it is handed, each record costing [`RECORD_COST`].
    struct Slow {
        clock: Manual,
        records: u64,
        drains: u64,
        drained_ns: u64,
        /// From which time on it holds records back for the kernel, when allowed to.
        holds_from_ns: Option<u64>,
        /// Records held back.
        held: u64,
        /// When the first records taken were taken, in the order they were.
        taken_ns: Vec<u64>,
        /// Drains in which what the task events taught must reach the kernel first, still to
        /// come.
        told_by_events: u32,
    }

    impl Sink for Slow {
        fn task_event(&mut self, _: TaskEvent) {}
        fn events_applied(&mut self) -> ControlFlow<()> {
            if self.told_by_events == 0 {
                return ControlFlow::Continue(());
            }
            self.told_by_events -= 1;
            ControlFlow::Break(())
        }
        fn record(&mut self, record: &[u8], pause: Pause) -> ControlFlow<()> {
            let time_ns = RecordKind::Sample.time_ns(record).unwrap_or(0);
            if pause == Pause::ForTheKernel && self.holds_from_ns.is_some_and(|from| time_ns >= from) {
                self.held += 1;
                return ControlFlow::Break(());
            }
            if self.taken_ns.len() < 16 {
                self.taken_ns.push(time_ns);
            }
            self.records += 1;
            self.clock.advance(RECORD_COST);
            ControlFlow::Continue(())
        }
        fn drained(&mut self, now_ns: u64) {
            self.drains += 1;
            self.drained_ns = now_ns;
        }
    }

    fn endless() -> (Intake<Endless, NoEvents, Manual>, Slow) {
        let clock = Manual::new();
        // A record of the distant past: never held back for its task events.
        let ring = Endless { record: vec![0; 64], handed: 0, ranked: false, late_rank: None };
        let intake = Intake::new(ring, NoEvents, clock.clone(), RecordKind::Sample);
        (
            intake,
            Slow {
                clock,
                records: 0,
                drains: 0,
                drained_ns: 0,
                holds_from_ns: None,
                held: 0,
                taken_ns: Vec::new(),
                told_by_events: 0,
            },
        )
    }

    /// The time the records handed to `sink` cost: at least `budget`, and at most one more
    /// look at the clock's worth of records beyond it.
    fn assert_within(sink: &Slow, budget: Duration) {
        let spent = RECORD_COST * sink.records as u32;
        assert!(spent >= budget, "stopped after {spent:?}, before its budget of {budget:?}");
        assert!(spent < budget + RECORD_COST * ASKS_EVERY as u32, "went on to {spent:?}, past {budget:?}");
    }

    #[test]
    fn a_drain_of_a_ring_that_never_empties_ends_at_its_budget() {
        let (mut intake, mut sink) = endless();
        intake.drain(&mut sink);
        assert_within(&sink, DRAIN_BUDGET);
        assert!(intake.behind, "the drain says it left work behind");
        assert_eq!(sink.drains, 1);
    }

    /// Records taken after the last one a drain handed over may still be in the ring: what the
    /// drain says is over is that record's time, not its horizon (processes gone before the
    /// horizon are still needed).
    #[test]
    fn a_drain_that_falls_behind_vouches_only_for_what_it_handed_over() {
        let (mut intake, mut sink) = endless();
        intake.ring.record[TIME_AT..TIME_AT + 8].copy_from_slice(&12_345u64.to_ne_bytes());
        intake.drain(&mut sink);
        assert!(intake.behind);
        assert_eq!(sink.drained_ns, 12_345);
    }

    #[test]
    fn the_last_drain_ends_at_its_budget_too_and_counts_what_it_threw_away() {
        let (mut intake, mut sink) = endless();
        intake.drain_all(&mut sink);
        assert_within(&sink, END_BUDGET);
        assert_eq!(intake.discarded(), 1000);
    }

    #[test]
    fn a_drain_ends_at_a_record_held_for_the_kernel_and_the_next_takes_it_first() {
        let (mut intake, mut sink) = endless();
        intake.ring.ranked = true;
        // The second record waits for the next drain's task events; every record from the third
        // on is held back whenever it may be.
        intake.ring.late_rank = Some(2);
        sink.holds_from_ns = Some(3);
        intake.drain(&mut sink);
        assert_eq!(
            (sink.taken_ns.as_slice(), sink.held, sink.drains),
            (&[1][..], 1, 1),
            "ended at the third"
        );
        assert!(ready_at_once(&mut intake), "the rest is taken as soon as the kernel has heard");
        intake.drain(&mut sink);
        assert_eq!(sink.taken_ns, [1, 3, LATE_NS], "the record held first, older than the late one");
        assert_eq!(sink.held, 2, "not held again; the fourth held in its turn");
        sink.holds_from_ns = None;
        intake.drain(&mut sink);
        assert_eq!(sink.taken_ns[..5], [1, 3, LATE_NS, 4, 5]);
    }

    /// A runtime found in what the task events say processes mapped reaches the kernel before
    /// any record is walked; the next drain takes its records whatever its events teach.
    #[test]
    fn a_drain_whose_task_events_found_a_runtime_walks_nothing_until_the_kernel_heard() {
        let (mut intake, mut sink) = endless();
        sink.told_by_events = 2;
        intake.drain(&mut sink);
        assert_eq!((sink.records, sink.drains), (0, 0), "no record walked, nothing vouched for");
        assert!(ready_at_once(&mut intake), "the records are taken as soon as the kernel has heard");
        intake.drain(&mut sink);
        assert_within(&sink, DRAIN_BUDGET);
        assert_eq!(sink.told_by_events, 0, "its events taught something too");
    }

    /// Once the kernel side is paused, what it would be told is moot: the last drain goes on.
    #[test]
    fn the_last_drain_does_not_end_for_the_kernel() {
        let (mut intake, mut sink) = endless();
        sink.holds_from_ns = Some(0);
        sink.told_by_events = 1;
        intake.drain_all(&mut sink);
        assert_within(&sink, END_BUDGET);
        assert_eq!(sink.held, 0);
    }

    /// Whether `intake` is ready within two polls (a yield takes one), its ring never waking it.
    fn ready_at_once(intake: &mut Intake<Endless, NoEvents, Manual>) -> bool {
        let mut ready = pin!(intake.ready(Duration::MAX));
        let mut context = Context::from_waker(Waker::noop());
        (0..2).any(|_| ready.as_mut().poll(&mut context).is_ready())
    }

    #[test]
    fn behind_means_ready_at_once() {
        let (mut intake, mut sink) = endless();
        assert!(!ready_at_once(&mut intake), "nothing left behind: it waits for the ring");
        intake.drain(&mut sink);
        assert!(ready_at_once(&mut intake), "work left behind: at once");
    }
}
