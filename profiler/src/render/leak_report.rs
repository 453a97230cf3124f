//! The leak report: the totals, then the stacks that hold the most outstanding bytes, innermost
//! frame first (as valgrind and heaptrack print them).
use std::{collections::HashMap, io::Write};

use crate::model::{Location, Recording, SymbolKind, printable};

/// Outstanding blocks that share a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub bytes: u64,
    pub blocks: u64,
    /// Index into [`Recording::stacks`].
    pub stack: u32,
    pub comm: u32,
}

/// The groups of outstanding blocks by stack (and command), most bytes first.
pub(crate) fn groups(recording: &Recording) -> Vec<Group> {
    let mut by_stack: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
    for sample in &recording.samples {
        let (bytes, blocks) = by_stack.entry((sample.stack, sample.comm)).or_default();
        *bytes += sample.weight;
        *blocks += 1;
    }
    let mut groups: Vec<Group> = by_stack
        .into_iter()
        .map(|((stack, comm), (bytes, blocks))| Group { bytes, blocks, stack, comm })
        .collect();
    groups.sort_unstable_by(|a, b| {
        (b.bytes, b.blocks).cmp(&(a.bytes, a.blocks)).then((a.stack, a.comm).cmp(&(b.stack, b.comm)))
    });
    groups
}

/// The report of a recording of outstanding blocks: totals, then the `top` stacks.
pub(crate) fn write(recording: &Recording, top: usize, out: &mut dyn Write) -> std::io::Result<()> {
    let groups = groups(recording);
    let bytes = recording.total_weight();
    let totals = recording.meta.allocations.unwrap_or_default();
    let scale = u64::from(totals.sample_every.max(1));
    writeln!(
        out,
        "profiler leaks: {} over {:.1} s",
        printable(&recording.meta.target),
        recording.meta.duration_ns as f64 / 1e9
    )?;
    writeln!(
        out,
        "{} allocations, {} frees, {} failed; peak outstanding {} bytes",
        thousands(totals.calls),
        thousands(totals.frees),
        thousands(totals.failed),
        thousands(totals.peak_bytes * scale)
    )?;
    let age = totals
        .min_age_ns
        .map(|ns| format!(" allocated {} s or more before the end", ns as f64 / 1e9))
        .unwrap_or_default();
    writeln!(
        out,
        "outstanding{age}: {} bytes in {} blocks from {} stacks",
        thousands(bytes),
        thousands(recording.samples.len() as u64 * scale),
        groups.len()
    )?;
    if scale > 1 {
        writeln!(out, "(one allocation in {scale} followed: bytes and blocks are estimates)")?;
    }
    if totals.not_followed > 0 {
        writeln!(
            out,
            "warning: {} allocations not followed: raise --max-outstanding",
            thousands(totals.not_followed)
        )?;
    }
    if recording.meta.lost_samples > 0 {
        writeln!(
            out,
            "warning: the stacks of {} allocations were lost (ring buffer full): see [stack lost]; follow one in N \
             with --sample-every N, or raise --ring-buffer",
            thousands(recording.meta.lost_samples)
        )?;
    }
    for (rank, group) in groups.iter().take(top).enumerate() {
        writeln!(out)?;
        writeln!(
            out,
            "#{}: {} bytes in {} blocks ({:.1}%) · {}",
            rank + 1,
            thousands(group.bytes),
            thousands(group.blocks * scale),
            100.0 * group.bytes as f64 / bytes.max(1) as f64,
            printable(&recording.comms[group.comm as usize])
        )?;
        for &location in &recording.stacks[group.stack as usize] {
            write_location(recording, &recording.locations[location as usize], out)?;
        }
    }
    if groups.len() > top {
        writeln!(out, "\n({} more stacks: raise --top, or see the flame graph)", groups.len() - top)?;
    }
    Ok(())
}

/// One line per name, innermost first (a location's names are outermost first).
fn write_location(recording: &Recording, location: &Location, out: &mut dyn Write) -> std::io::Result<()> {
    let module = location.module.map(|m| recording.modules[m as usize].name());
    for symbol in location.symbols.iter().rev() {
        let name = match symbol.kind {
            SymbolKind::Inlined => format!("{} (inlined)", symbol.name),
            _ => symbol.display_name(),
        };
        match module {
            Some(module) => writeln!(out, "    {}  [{}]", printable(&name), printable(module))?,
            None => writeln!(out, "    {}", printable(&name))?,
        }
    }
    Ok(())
}

/// `4096000` as `4,096,000`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AllocationTotals, Meta, Sample, ThreadState, Weight};
    use crate::model::{Tgid, Tid};

    fn block(stack: u32, weight: u64) -> Sample {
        Sample {
            time_ns: 0,
            pid: Tgid(1),
            tid: Tid(1),
            comm: 0,
            stack,
            weight,
            state: ThreadState::OnCpu,
            labels: 0,
        }
    }

    fn leaks_fixture() -> Recording {
        let mut recording = crate::model::tests::fixture();
        let allocations = AllocationTotals {
            calls: 1234,
            frees: 1230,
            peak_bytes: 10000,
            sample_every: 1,
            ..Default::default()
        };
        recording.meta = Meta {
            target: "PID 1".into(),
            weight: Weight::Bytes,
            allocations: Some(allocations),
            ..Meta::default()
        };
        recording.samples = vec![block(0, 100), block(1, 4096), block(1, 4096), block(0, 50)];
        recording
    }

    #[test]
    fn groups_by_stack_most_bytes_first() {
        let groups = groups(&leaks_fixture());
        let summary: Vec<(u64, u64, u32)> = groups.iter().map(|g| (g.bytes, g.blocks, g.stack)).collect();
        assert_eq!(summary, [(8192, 2, 1), (150, 2, 0)]);
    }

    #[test]
    fn report_lists_totals_and_top_stacks() {
        let mut out = Vec::new();
        write(&leaks_fixture(), 1, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("1,234 allocations, 1,230 frees, 0 failed; peak outstanding 10,000 bytes"),
            "{text}"
        );
        assert!(text.contains("outstanding: 8,342 bytes in 4 blocks from 2 stacks"), "{text}");
        assert!(text.contains("#1: 8,192 bytes in 2 blocks (98.2%)"), "{text}");
        assert!(!text.contains("#2"), "{text}");
        assert!(text.contains("(1 more stacks"), "{text}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(4096000), "4,096,000");
        assert_eq!(thousands(1000000000), "1,000,000,000");
    }
}
