//! Reading sample records from the ring buffer.
//!
//! The eBPF program does not wake the reader for each record (that costs the kernel more than
//! the sample itself); it wakes it only when the ring is a quarter full. The reader drains the
//! ring every [`DRAIN_INTERVAL`] and on such wakeups.
use std::{io, time::Duration};

use aya::maps::{MapData, RingBuf};
use tokio::{
    io::unix::AsyncFd,
    time::{Interval, MissedTickBehavior, interval},
};

/// How often the ring is drained without a wakeup: a 32 MiB ring holds about half a second of
/// the largest records at 999 Hz on two CPUs, so this leaves a wide margin.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(20);

pub struct RingReader {
    fd: AsyncFd<RingBuf<MapData>>,
    tick: Interval,
}

impl RingReader {
    pub fn new(ring: RingBuf<MapData>) -> io::Result<Self> {
        // SAFETY: the ring buffer owns its descriptor and keeps it open while registered.
        let fd = unsafe { AsyncFd::register(ring)? };
        let mut tick = interval(DRAIN_INTERVAL);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Self { fd, tick })
    }

    /// Waits for the next tick, or for a wakeup from a filling ring.
    pub async fn ready(&mut self) -> io::Result<()> {
        tokio::select! {
            _ = self.tick.tick() => Ok(()),
            guard = self.fd.readable_mut() => {
                // Records written from now on are drained next; a full ring wakes us again.
                guard?.clear_ready();
                Ok(())
            }
        }
    }

    /// Hands every record available now to `consume`, without waiting.
    pub fn drain(&mut self, consume: impl FnMut(&[u8])) -> usize {
        drain(self.fd.get_mut(), consume)
    }
}

fn drain(ring: &mut RingBuf<MapData>, mut consume: impl FnMut(&[u8])) -> usize {
    let mut count = 0;
    while let Some(record) = ring.next() {
        consume(&record);
        count += 1;
    }
    count
}
