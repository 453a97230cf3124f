//! Stack frames as recorded: where each address belonged when the sample was taken, before
//! anything is named.
use crate::{
    address_space::{ModuleId, Resolved},
    model::Tgid,
};

/// One frame of a stack, before symbolization. Stacks are stored innermost frame first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// A kernel address.
    Kernel(u64),
    /// A user address inside a module, as an offset into the module's file.
    Module { module: ModuleId, offset: u64 },
    /// A user address in anonymous memory or in no mapping at all.
    Anonymous { tgid: Tgid, addr: u64 },
    /// A function of a runtime (Python, Java) at a line: an index into the runtimes' functions
    /// (`runtimes::functions::Functions`), and the line its frame was at.
    Runtime { function: u32, line: u32 },
    /// No code: what a thread did instead of running some.
    Marker(Marker),
}

/// What a [`Frame::Marker`] stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Marker {
    /// Runnable, waiting for a CPU (in place of the scheduler's kernel frames).
    Runqueue,
    /// Off the CPU when the recording ended, since a time the stack of which was not taken.
    OffCpuAtEnd,
}

impl Marker {
    pub fn name(self) -> &'static str {
        match self {
            Self::Runqueue => "[runqueue]",
            Self::OffCpuAtEnd => "[off the CPU at the end]",
        }
    }
}

impl Frame {
    /// The user frame at `depth` (0 = innermost) whose address `addr` of process `tgid` resolved
    /// as `resolved`. Callers' addresses are return addresses, one past the call: the frame
    /// steps back one byte, inside the call instruction, so that it lands in the caller's
    /// function and line even when the call was its last instruction.
    pub fn user(tgid: Tgid, depth: usize, addr: u64, resolved: Resolved) -> Self {
        let back = addr - lookup_address(depth, addr);
        match resolved {
            Resolved::Module { module, file_offset } => Self::Module { module, offset: file_offset - back },
            Resolved::Anonymous | Resolved::Unmapped => Self::Anonymous { tgid, addr: addr - back },
        }
    }

    /// The kernel frame at `depth`, stepped back as [`Frame::user`] says.
    pub fn kernel(depth: usize, addr: u64) -> Self {
        Self::Kernel(lookup_address(depth, addr))
    }
}

/// The address to look up for the frame at `depth`: the return addresses of callers step back
/// into their call instruction.
pub(crate) fn lookup_address(depth: usize, addr: u64) -> u64 {
    if depth == 0 { addr } else { addr.saturating_sub(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_step_back_into_the_call() {
        assert_eq!(lookup_address(0, 0x1000), 0x1000);
        assert_eq!(lookup_address(1, 0x1000), 0xfff);
        assert_eq!(lookup_address(3, 0), 0);
    }

    #[test]
    fn frames_step_back_like_their_lookups() {
        let module = ModuleId::from_index(3);
        let at = |file_offset| Resolved::Module { module, file_offset };
        assert_eq!(Frame::user(Tgid(7), 0, 0x5000, at(0x1000)), Frame::Module { module, offset: 0x1000 });
        assert_eq!(Frame::user(Tgid(7), 1, 0x6000, at(0x2000)), Frame::Module { module, offset: 0x1fff });
        assert_eq!(
            Frame::user(Tgid(7), 2, 0x7000, Resolved::Anonymous),
            Frame::Anonymous { tgid: Tgid(7), addr: 0x6fff }
        );
        assert_eq!(
            Frame::user(Tgid(7), 0, 0x10, Resolved::Unmapped),
            Frame::Anonymous { tgid: Tgid(7), addr: 0x10 }
        );
        assert_eq!(Frame::kernel(1, 0xffff_0020), Frame::Kernel(0xffff_001f));
    }
}
