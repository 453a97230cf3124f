//! Text a target controls in part (the paths in its `/proc/PID/maps`, its perf map): any bytes
//! parse to mappings and symbols, or an error, never a panic.

use profiler::stages::{Mappings, PerfMap};

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    if let Ok(mappings) = Mappings::parse(data) {
        for mapping in mappings.mappings() {
            let _ = (mappings.find(mapping.start), mapping.file_offset(mapping.start));
        }
    }
    // A perf map read in pieces, as appended by its runtime.
    let mut map = PerfMap::default();
    for piece in data.chunks(7) {
        map.append(piece);
    }
    for addr in [0, 0x1000, 0x7f00_0000_0000, u64::MAX] {
        let _ = map.name(addr);
    }
}
