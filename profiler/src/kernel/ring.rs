//! Reading sample records from the ring buffer.
//!
//! The eBPF program does not wake the reader for each record (that costs the kernel more than
//! the sample itself); it wakes it only when the ring is a quarter full. The reader drains the
//! ring every [`DRAIN_INTERVAL`] (or sooner, as its caller says) and on such wakeups.
use std::{io, ops::ControlFlow, time::Duration};

use aya::maps::{MapData, RingBuf};
use tokio::{io::unix::AsyncFd, time::Instant};

/// How often the ring is drained without a wakeup: the default ring (1 MiB per CPU) holds about
/// a quarter second of 4 KiB samples at 999 Hz, so this leaves a wide margin.
pub(crate) const DRAIN_INTERVAL: Duration = Duration::from_millis(20);

pub(crate) struct RingReader {
    fd: AsyncFd<RingBuf<MapData>>,
    /// When the last wait ended.
    woken: Instant,
}

impl RingReader {
    pub(crate) fn new(ring: RingBuf<MapData>) -> io::Result<Self> {
        // SAFETY: the ring buffer owns its descriptor and keeps it open while registered.
        let fd = unsafe { AsyncFd::register(ring)? };
        Ok(Self { fd, woken: Instant::now() })
    }

    /// Waits until `interval` has passed since the last wait ended, or for a wakeup from a
    /// filling ring.
    pub(crate) async fn ready(&mut self, interval: Duration) -> io::Result<()> {
        let ready = tokio::select! {
            () = tokio::time::sleep_until(self.woken + interval) => Ok(()),
            guard = self.fd.readable_mut() => {
                // Records written from now on are drained next; a full ring wakes us again.
                guard.map(|mut guard| guard.clear_ready())
            }
        };
        self.woken = Instant::now();
        ready
    }

    /// Hands the records available now to `consume`, without waiting, until `out_of_time` or
    /// `consume` says so. Returns whether it stopped before the ring was empty.
    pub(crate) fn drain(
        &mut self,
        mut out_of_time: impl FnMut() -> bool,
        mut consume: impl FnMut(&[u8]) -> ControlFlow<()>,
    ) -> bool {
        let ring = self.fd.get_mut();
        let mut count = 0u32;
        while let Some(record) = ring.next() {
            if consume(&record).is_break() {
                return true;
            }
            count = count.wrapping_add(1);
            // The clock is read every so many records: reading it costs more than a record.
            if count.is_multiple_of(CLOCK_EVERY) && out_of_time() {
                return true;
            }
        }
        false
    }

    /// Throws away every record available now; returns how many.
    pub(crate) fn discard(&mut self) -> u64 {
        let ring = self.fd.get_mut();
        let mut count = 0;
        while ring.next().is_some() {
            count += 1;
        }
        count
    }
}

/// Records handled between two looks at the clock.
const CLOCK_EVERY: u32 = 64;
