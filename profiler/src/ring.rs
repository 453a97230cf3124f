//! Reading sample records from the ring buffer, woken by tokio when records arrive.
use std::io;

use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

pub struct RingReader {
    fd: AsyncFd<RingBuf<MapData>>,
}

impl RingReader {
    pub fn new(ring: RingBuf<MapData>) -> io::Result<Self> {
        // SAFETY: the ring buffer owns its descriptor and keeps it open while registered.
        Ok(Self { fd: unsafe { AsyncFd::register(ring)? } })
    }

    /// Waits for records, then hands each available record to `consume`. Returns how many.
    pub async fn read(&mut self, consume: impl FnMut(&[u8])) -> io::Result<usize> {
        let mut guard = self.fd.readable_mut().await?;
        let count = drain(guard.get_inner_mut(), consume);
        // After draining: a record committed meanwhile re-arms readiness.
        guard.clear_ready();
        Ok(count)
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
