//! Stack frames as recorded: where each address belonged when the sample was taken.
use crate::{
    module::{ModuleId, Modules},
    process::Process,
    unwind::Location,
};

/// One frame of a stack, before symbolization. Stacks are stored innermost frame first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// A kernel address.
    Kernel(u64),
    /// A user address inside a module, as an offset into the module's file.
    Module { module: ModuleId, offset: u64 },
    /// A user address in anonymous memory or in no mapping at all.
    Anonymous { tgid: u32, addr: u64 },
}

/// The address to look up for the frame at `depth` (0 = innermost). Callers' addresses are
/// return addresses, one past the call: stepping back one byte lands inside the call
/// instruction, in the caller's function and line even when the call was its last instruction.
pub fn lookup_address(depth: usize, addr: u64) -> u64 {
    if depth == 0 { addr } else { addr.saturating_sub(1) }
}

/// Appends the kernel frames for `addrs` (innermost first).
pub fn push_kernel(addrs: &[u64], frames: &mut Vec<Frame>) {
    frames.extend(addrs.iter().enumerate().map(|(depth, &addr)| Frame::Kernel(lookup_address(depth, addr))));
}

/// The user stack of one sample, to be pinned to modules.
pub struct UserStack<'a> {
    pub tgid: u32,
    /// When the sample was taken: addresses are resolved with the mappings of that moment.
    pub time_ns: u64,
    /// Addresses, innermost first.
    pub addrs: &'a [u64],
    /// Depth of the first address (0 when it is the ip, else they are all return addresses).
    pub first_depth: usize,
}

/// Appends the frames of `stack`, resolving each address to its module and file offset.
pub fn push_user(
    stack: &UserStack<'_>,
    process: &mut Process,
    modules: &mut Modules,
    frames: &mut Vec<Frame>,
) {
    for (depth, &addr) in stack.addrs.iter().enumerate().map(|(i, a)| (i + stack.first_depth, a)) {
        frames.push(user_frame(stack, process, modules, lookup_address(depth, addr)));
    }
}

/// Appends frames already located by the unwinder (no second lookup of their mappings).
pub fn push_located(tgid: u32, addrs: &[u64], locations: &[Location], frames: &mut Vec<Frame>) {
    for (depth, (&addr, location)) in addrs.iter().zip(locations).enumerate() {
        let back = addr - lookup_address(depth, addr);
        frames.push(match *location {
            Location::Module { module, file_offset } => Frame::Module { module, offset: file_offset - back },
            Location::Anonymous | Location::NotCode => Frame::Anonymous { tgid, addr: addr - back },
        });
    }
}

fn user_frame(stack: &UserStack<'_>, process: &mut Process, modules: &mut Modules, addr: u64) -> Frame {
    let tgid = stack.tgid;
    let Some(mapping) = process.mapping(addr, stack.time_ns) else {
        return Frame::Anonymous { tgid, addr };
    };
    match modules.intern(tgid, mapping) {
        Some(module) => Frame::Module { module, offset: mapping.file_offset(addr) },
        None => Frame::Anonymous { tgid, addr },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{Processes, Tracking};

    #[test]
    fn callers_step_back_into_the_call() {
        assert_eq!(lookup_address(0, 0x1000), 0x1000);
        assert_eq!(lookup_address(1, 0x1000), 0xfff);
        assert_eq!(lookup_address(3, 0), 0);
    }

    #[test]
    fn resolves_own_code_to_its_file_offset() {
        let pid = std::process::id();
        let mut processes = Processes::new(Tracking { all: false, follow_forks: false });
        let mut modules = Modules::default();
        let process = processes.observe(pid, pid, "test");
        let here = resolves_own_code_to_its_file_offset as *const () as usize as u64;
        let mut frames = Vec::new();
        push_user(
            &UserStack { tgid: pid, time_ns: 0, addrs: &[here, 0x10], first_depth: 0 },
            process,
            &mut modules,
            &mut frames,
        );
        let Frame::Module { module, offset } = frames[0] else { panic!("{:?}", frames[0]) };
        let mapping = process.mapping(here, 0).unwrap().clone();
        assert_eq!(offset, here - mapping.start + mapping.offset);
        assert!(modules.get(module).readable_path().is_some());
        assert_eq!(frames[1], Frame::Anonymous { tgid: pid, addr: 0xf });
    }

    #[test]
    fn located_frames_step_back_like_resolved_ones() {
        let module = ModuleId::from_index(3);
        let locations = [
            Location::Module { module, file_offset: 0x1000 },
            Location::Module { module, file_offset: 0x2000 },
            Location::Anonymous,
        ];
        let mut frames = Vec::new();
        push_located(7, &[0x5000, 0x6000, 0x7000], &locations, &mut frames);
        assert_eq!(
            frames,
            [
                Frame::Module { module, offset: 0x1000 },
                Frame::Module { module, offset: 0x1fff },
                Frame::Anonymous { tgid: 7, addr: 0x6fff },
            ]
        );
    }

    #[test]
    fn kernel_frames_keep_order() {
        let mut frames = Vec::new();
        push_kernel(&[0xffff_0010, 0xffff_0020], &mut frames);
        assert_eq!(frames, [Frame::Kernel(0xffff_0010), Frame::Kernel(0xffff_001f)]);
    }
}
