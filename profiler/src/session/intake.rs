//! Where everything the kernel reports goes: ring-buffer records and task events, handed on in
//! time order.
use anyhow::{Context as _, Result};

use crate::{
    address_space::TaskEvent,
    clock,
    decode::RecordKind,
    kernel::{ring::RingReader, task_events::TaskEventReader},
};

/// What takes the records and task events of a drain.
pub trait Sink {
    fn task_event(&mut self, event: TaskEvent);
    fn record(&mut self, record: &[u8]);
    /// The drain is over: nothing taken before `now_ns` is still to come.
    fn drained(&mut self, now_ns: u64);
}

pub struct Intake {
    ring: RingReader,
    task_events: TaskEventReader,
    kind: RecordKind,
    /// Records taken after the task events were read: their mappings may still be on the way.
    later: Vec<Vec<u8>>,
}

impl Intake {
    pub fn new(ring: RingReader, task_events: TaskEventReader, kind: RecordKind) -> Self {
        Self { ring, task_events, kind, later: Vec::new() }
    }

    /// Waits for the ring (its drain tick, or a wakeup).
    pub async fn ready(&mut self) -> Result<()> {
        self.ring.ready().await.context("cannot read the ring buffer")
    }

    /// Hands `sink` the pending task events and records, in time order: a record must find the
    /// mappings made before it. Task events are read up to a horizon; records taken after it
    /// wait for the next drain, whose task events will cover them.
    pub fn drain(&mut self, sink: &mut impl Sink) {
        let Self { ring, task_events, kind, later } = self;
        let horizon = clock::monotonic_ns();
        task_events.drain(|event| sink.task_event(event));
        for record in later.drain(..) {
            sink.record(&record);
        }
        ring.drain(|record| match kind.time_ns(record) {
            Some(time_ns) if time_ns > horizon => later.push(record.to_vec()),
            _ => sink.record(record),
        });
        sink.drained(horizon);
    }

    /// Drains until nothing is held back: at the end, when no record can be newer than the
    /// task events read next.
    pub fn drain_all(&mut self, sink: &mut impl Sink) {
        self.drain(sink);
        if !self.later.is_empty() {
            self.drain(sink);
        }
    }
}
