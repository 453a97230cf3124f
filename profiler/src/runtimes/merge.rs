//! Putting the frames an interpreter's kernel walker read in place of the native calls of its
//! eval loop that ran them, the same for every interpreter whose frames live off the native
//! stack: each call of the loop runs a run of the interpreter's frames.
use crate::frame::Frame;

/// One sample's interpreter frames, translated from its kernel walker's records innermost first,
/// cut into the runs each native call of the eval loop ran: the scratch every interpreter's merge
/// fills (kept for its allocations), then puts in place of those calls.
#[derive(Default)]
pub(super) struct Runs {
    frames: Vec<Frame>,
    /// Where each run ends in `frames`.
    ends: Vec<usize>,
    native: Vec<Frame>,
}

impl Runs {
    /// Starts a new sample's.
    pub(super) fn clear(&mut self) {
        self.frames.clear();
        self.ends.clear();
    }

    /// The next frame, outwards.
    pub(super) fn push(&mut self, frame: Frame) {
        self.frames.push(frame);
    }

    /// The frames since the last run's end were one call of the eval loop.
    pub(super) fn end_run(&mut self) {
        self.ends.push(self.frames.len());
    }

    /// Puts the runs in place of the native frames of `stack` (innermost first) for which
    /// `is_eval_loop` holds (see [`merge`]); the frames after the last run's end are a run too.
    pub(super) fn merge_into(&mut self, stack: &mut Vec<Frame>, is_eval_loop: impl Fn(&Frame) -> bool) {
        if self.ends.last() != Some(&self.frames.len()) {
            self.end_run();
        }
        let mut start = 0;
        let runs: Vec<&[Frame]> = self
            .ends
            .iter()
            .map(|&end| {
                let run = &self.frames[start..end];
                start = end;
                run
            })
            .collect();
        self.native.clear();
        self.native.append(stack);
        merge(&self.native, &runs, is_eval_loop, stack);
    }
}

/// Replaces native frames for which `is_eval_loop` holds with the runs of `runs` (each run
/// innermost first, `runs` innermost first too), pairing them from the outermost.
///
/// A sample taken as a call enters or leaves the loop sees the call's eval-loop frame before
/// its run is published or after it is taken down: such extra frames are at the inner end, and
/// stay as they are (the interpreter's own time, under the interpreted function that made the
/// call). When the runs outnumber the eval-loop frames instead, the native unwind stopped early:
/// runs pair from the innermost and those left over go outermost.
fn merge(
    native: &[Frame],
    runs: &[&[Frame]],
    is_eval_loop: impl Fn(&Frame) -> bool,
    merged: &mut Vec<Frame>,
) {
    let loops = native.iter().filter(|frame| is_eval_loop(frame)).count();
    let mut unpaired = loops.saturating_sub(runs.len());
    let mut runs = runs.iter();
    for frame in native {
        if !is_eval_loop(frame) {
            merged.push(*frame);
        } else if unpaired > 0 {
            unpaired -= 1;
            merged.push(*frame);
        } else {
            match runs.next() {
                Some(run) => merged.extend_from_slice(run),
                None => merged.push(*frame),
            }
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
        merge(native_frames, runs, is_eval, &mut merged);
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
    fn a_call_entering_the_loop_keeps_its_frame_innermost() {
        let (py_a, py_b) = (native(0xa), native(0xb));
        // leaf: eval [no run yet] <- call (C) <- eval [a] <- eval [b] <- main
        let stack = [native(EVAL), native(1), native(EVAL), native(EVAL), native(2)];
        assert_eq!(merged(&stack, &[&[py_a], &[py_b]]), [native(EVAL), native(1), py_a, py_b, native(2)]);
    }

    #[test]
    fn runs_beyond_a_cut_unwind_go_outermost() {
        let (py_a, py_b) = (native(0xa), native(0xb));
        assert_eq!(merged(&[native(1), native(EVAL)], &[&[py_a], &[py_b]]), [native(1), py_a, py_b]);
        assert_eq!(merged(&[native(1)], &[]), [native(1)], "no Python");
    }
}
