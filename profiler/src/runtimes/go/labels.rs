//! Goroutine labels (`pprof.Do`, `pprof.SetGoroutineLabels`): where the kernel finds those of the
//! goroutine a sampled thread runs, in each Go release's structures (docs/go-layouts.md §9), and
//! what it read of a sample.
use profiler_common::runtimes::go::{
    GoLabel, GoLabelsLayout, GoProcess as KernelRecord, LABELS_HEADER_BYTES, MAX_GO_LABEL_BYTES,
    MAX_GO_LABELS,
};

use crate::model::{LabelSet, printable_owned};

/// `g.m` and `g.sched`, the same in every release read.
const G_M: u32 = 48;
const G_SCHED: u32 = 56;
/// Where a thread's current `g` is from its thread pointer. With cgo it is Go's thread-local
/// variable (`runtime.tlsg`, 8 bytes), the executable's only one, so the last of its TLS block,
/// which ends at the thread pointer; without, Go points the thread pointer 8 bytes past it.
const G_OFFSET: i64 = -8;

/// Where the kernel finds the goroutine a thread of a binary built by Go 1.`minor` runs (its
/// labels, and its stack when the thread left it), whose executable's static TLS block is
/// `tls_bytes` long (`None`: it has none); why not, when it cannot.
pub(super) fn kernel_record(minor: Option<u32>, tls_bytes: Option<u64>) -> Result<KernelRecord, String> {
    use GoLabelsLayout::{Map, Slice};
    let minor = minor.ok_or("the Go release that built it does not say")?;
    let (m_curg, g_labels, layout) = match minor {
        15 | 16 => (192, 344, Map),
        17..=20 => (192, 360, Map),
        21 | 22 => (192, 344, Map),
        23 => (192, 352, Map),
        24 => (192, 352, Slice),
        25 => (184, 344, Slice),
        26 | 27 => (184, 352, Slice),
        _ => return Err(format!("where Go 1.{minor} keeps them is not known")),
    };
    // Go 1.25 took `gobuf.ret` out, before `gobuf.bp`.
    let gobuf_bp = if minor >= 25 { 40 } else { 48 };
    if tls_bytes.is_some_and(|bytes| bytes > 8) {
        return Err("C code in it has thread-local variables, which move Go's".to_owned());
    }
    Ok(KernelRecord {
        g_offset: G_OFFSET,
        g_m: G_M,
        m_curg,
        g_labels,
        labels_layout: layout as u32,
        g_sched: G_SCHED,
        gobuf_bp,
    })
}

/// The labels in the kernel's record of a sample (`records`), sorted by key, into `labels`;
/// whether the goroutine had more than were read.
pub(super) fn decode(records: &[u8], labels: &mut LabelSet) -> bool {
    let word = |at: usize| Some(u32::from_le_bytes(records.get(at..at + 4)?.try_into().ok()?));
    let (Some(count), Some(truncated)) = (word(0), word(4)) else { return false };
    let read = records[LABELS_HEADER_BYTES..].as_chunks::<{ size_of::<GoLabel>() }>().0;
    for label in read.iter().take((count as usize).min(MAX_GO_LABELS)) {
        let label: GoLabel = bytemuck::pod_read_unaligned(label);
        labels.push((text(&label.key, label.key_len), text(&label.value, label.value_len)));
    }
    // A map's order is its hash's.
    labels.sort_unstable();
    truncated != 0
}

/// A key or value as read (`bytes`, of a string `len` bytes long), made printable (the target's
/// bytes go into every output): cut ones end with `…`.
fn text(bytes: &[u8; MAX_GO_LABEL_BYTES], len: u32) -> String {
    let kept = &bytes[..(len as usize).min(MAX_GO_LABEL_BYTES)];
    let mut text = printable_owned(String::from_utf8_lossy(kept).into_owned());
    if len as usize > MAX_GO_LABEL_BYTES {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use profiler_common::runtimes::go::GoLabels;

    use super::*;

    fn label(key: &str, value: &[u8]) -> GoLabel {
        let mut label = GoLabel {
            key_len: key.len() as u32,
            value_len: value.len() as u32,
            key: [0; MAX_GO_LABEL_BYTES],
            value: [0; MAX_GO_LABEL_BYTES],
        };
        label.key[..key.len()].copy_from_slice(key.as_bytes());
        let kept = value.len().min(MAX_GO_LABEL_BYTES);
        label.value[..kept].copy_from_slice(&value[..kept]);
        label
    }

    /// The record of `labels`, as the kernel sends it: up to its last label.
    fn record(labels: &[GoLabel], truncated: bool) -> Vec<u8> {
        let mut record = GoLabels {
            count: labels.len() as u32,
            truncated: u32::from(truncated),
            labels: [label("", b""); MAX_GO_LABELS],
        };
        record.labels[..labels.len()].copy_from_slice(labels);
        bytemuck::bytes_of(&record)[..LABELS_HEADER_BYTES + size_of_val(labels)].to_vec()
    }

    #[test]
    fn labels_are_sorted_and_long_values_cut() {
        let long = [b'x'; 70];
        let mut labels = LabelSet::new();
        let cut = decode(
            &record(&[label("worker", b"w1"), label("path", &long), label("bad", b"\xff")], true),
            &mut labels,
        );
        let kept = format!("{}…", "x".repeat(MAX_GO_LABEL_BYTES));
        let expected = [("bad", "\u{fffd}"), ("path", kept.as_str()), ("worker", "w1")];
        assert!(cut, "more labels than were read");
        assert_eq!(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn a_short_or_lying_record_gives_what_it_holds() {
        let mut labels = LabelSet::new();
        assert!(!decode(&[1, 0], &mut labels), "no header");
        let mut lying = record(&[label("a", b"1")], false);
        lying[0] = 200;
        decode(&lying, &mut labels);
        assert_eq!(labels, [("a".to_owned(), "1".to_owned())], "a count past the record's end");
    }

    #[test]
    fn labels_are_found_per_release() {
        let found =
            |minor, tls| kernel_record(Some(minor), tls).map(|r| (r.m_curg, r.g_labels, r.labels_layout));
        assert_eq!(found(19, None), Ok((192, 360, GoLabelsLayout::Map as u32)));
        assert_eq!(found(26, Some(8)), Ok((184, 352, GoLabelsLayout::Slice as u32)));
        assert_eq!(found(40, None), Err("where Go 1.40 keeps them is not known".to_owned()));
        assert!(found(27, Some(64)).is_err(), "C thread-local variables move Go's");
        assert!(kernel_record(None, None).is_err());
    }
}
