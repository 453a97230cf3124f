//! Task-event records (mmap2, comm, fork, exit, lost) as the kernel's perf buffer holds them:
//! any type, bits and bytes decode to an event or nothing, never a panic.

use std::sync::LazyLock;

use profiler::stages::task_events;

static CONFIG: LazyLock<task_events::ParseConfig> = LazyLock::new(task_events::parse_config);

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    let Some((head, bytes)) = data.split_first_chunk::<6>() else { return };
    let ty = u32::from_le_bytes(head[..4].try_into().unwrap());
    let misc = u16::from_le_bytes(head[4..].try_into().unwrap());
    // Mostly the types the reader cares about, and anything else now and then.
    let ty = if ty % 8 == 0 { ty } else { [1, 2, 3, 4, 7, 10][ty as usize % 6] };
    if let Some(event) = task_events::decode(&CONFIG, ty, misc, bytes) {
        let _ = event.time_ns();
    }
}
