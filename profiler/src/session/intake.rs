//! Where everything the kernel reports goes: ring-buffer records (CPU samples, or allocations)
//! and task events, handed to the collector in time order.
use anyhow::{Context as _, Result};

use crate::{collect::Collector, process, ring::RingReader, task_events::TaskEventReader};

/// The kind of ring-buffer record, which says where its timestamp is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A CPU sample (`record`).
    Sample,
    /// An allocation (`leaks`).
    Allocation,
}

impl RecordKind {
    /// When the record was taken; `None` if it is too short to say (the collector counts it).
    fn time_ns(self, record: &[u8]) -> Option<u64> {
        match self {
            Self::Sample => crate::decode::sample_time_ns(record),
            Self::Allocation => crate::decode::allocation_time_ns(record),
        }
    }
}

pub struct Intake {
    ring: RingReader,
    task_events: TaskEventReader,
    pub collector: Collector,
    kind: RecordKind,
    /// Records taken after the task events were read: their mappings may still be on the way.
    later: Vec<Vec<u8>>,
}

impl Intake {
    pub fn new(
        ring: RingReader,
        task_events: TaskEventReader,
        collector: Collector,
        kind: RecordKind,
    ) -> Self {
        Self { ring, task_events, collector, kind, later: Vec::new() }
    }

    /// Hands `add` the pending records, and the collector the task events, in time order: a
    /// record must find the mappings made before it. Task events are read up to a horizon;
    /// records taken after it wait for the next drain, whose task events will cover them.
    pub fn drain(&mut self, mut add: impl FnMut(&mut Collector, &[u8])) {
        let Self { ring, task_events, collector, kind, later } = self;
        let horizon = process::monotonic_ns();
        task_events.drain(|event| collector.add_task_event(event));
        for record in later.drain(..) {
            add(collector, &record);
        }
        ring.drain(|record| match kind.time_ns(record) {
            Some(time_ns) if time_ns > horizon => later.push(record.to_vec()),
            _ => add(collector, record),
        });
        collector.prune(horizon);
    }

    /// Waits for the ring (its drain tick, or a wakeup), hands over what came, and names the new
    /// frames. Returns the stack ends learned, for the kernel's `STACK_ENDS` map.
    pub async fn advance(&mut self, add: impl FnMut(&mut Collector, &[u8])) -> Result<Vec<(u32, u64)>> {
        self.ring.ready().await.context("cannot read the ring buffer")?;
        self.drain(add);
        self.collector.symbolize_new();
        Ok(self.collector.take_stack_ends())
    }

    /// Drains until nothing is held back: at the end, when no record can be newer than the
    /// task events read next.
    pub fn drain_all(&mut self, mut add: impl FnMut(&mut Collector, &[u8])) {
        self.drain(&mut add);
        if !self.later.is_empty() {
            self.drain(&mut add);
        }
    }
}
