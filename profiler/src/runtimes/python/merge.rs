//! Putting Python frames in place of the native calls of the eval loop that ran them.
use crate::frame::Frame;

/// Replaces, innermost first, the k-th native frame for which `is_eval_loop` holds with the k-th
/// run of `runs` (each run innermost first). A sample taken as a call enters or leaves the loop
/// may see one run more or less than native frames: an eval-loop frame left without a run stays
/// as it is, and runs left without a native frame (the native unwind stopped early) go outermost.
pub fn merge<'a>(
    native: &[Frame],
    runs: impl IntoIterator<Item = &'a [Frame]>,
    is_eval_loop: impl Fn(&Frame) -> bool,
    merged: &mut Vec<Frame>,
) {
    let mut runs = runs.into_iter();
    for frame in native {
        match is_eval_loop(frame).then(|| runs.next()).flatten() {
            Some(run) => merged.extend_from_slice(run),
            None => merged.push(*frame),
        }
    }
    for run in runs {
        merged.extend_from_slice(run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Tgid;

    fn native(addr: u64) -> Frame {
        Frame::Anonymous { tgid: Tgid(1), addr }
    }

    const EVAL: u64 = 0xe0;

    fn merged(native_frames: &[Frame], runs: &[&[Frame]]) -> Vec<Frame> {
        let mut merged = Vec::new();
        let is_eval = |frame: &Frame| matches!(frame, Frame::Anonymous { addr: EVAL, .. });
        merge(native_frames, runs.iter().copied(), is_eval, &mut merged);
        merged
    }

    #[test]
    fn each_eval_loop_call_takes_its_run() {
        let (py_a, py_b, py_c) = (native(0xa), native(0xb), native(0xc));
        // leaf (C) <- eval [a] <- call (C) <- eval [b, c] <- main
        let stack = [native(1), native(EVAL), native(2), native(EVAL), native(3)];
        assert_eq!(
            merged(&stack, &[&[py_a], &[py_b, py_c]]),
            [native(1), py_a, native(2), py_b, py_c, native(3)]
        );
    }

    #[test]
    fn mismatched_counts_keep_every_frame() {
        let (py_a, py_b) = (native(0xa), native(0xb));
        let stack = [native(1), native(EVAL), native(EVAL)];
        assert_eq!(merged(&stack, &[&[py_a]]), [native(1), py_a, native(EVAL)], "a call entering the loop");
        assert_eq!(
            merged(&[native(1), native(EVAL)], &[&[py_a], &[py_b]]),
            [native(1), py_a, py_b],
            "unwind cut"
        );
        assert_eq!(merged(&[native(1)], &[]), [native(1)], "no Python");
    }
}
