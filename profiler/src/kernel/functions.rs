//! Kernel frames kept as the start of their function. A kernel frame is named by its function
//! alone (its address is kept only with `--kernel-addresses`), and the stacks of a long
//! recording differ mostly by where in a kernel function they were taken: one frame per function
//! makes those one stack, so that the aggregate (which interns each kernel frame through this)
//! grows with the functions the kernel ran, not with its instructions.
use anyhow::Result;
use rustc_hash::FxHashMap;

use super::names::KernelNamer;
use crate::frame::Frame;

/// What says where the kernel's functions start: the kernel itself ([`KernelStarts`]), or a
/// test's table.
pub trait FunctionStarts: Send {
    /// The start of the function each of `addresses` is in, `None` where none is known.
    fn starts(&mut self, addresses: &[u64]) -> Result<Vec<Option<u64>>>;
}

/// The kernel's naming program as a [`FunctionStarts`], loaded when first asked: a session may
/// meet no kernel frame (`leaks`), and then costs nothing.
#[derive(Default)]
pub(crate) struct KernelStarts {
    namer: Option<KernelNamer>,
}

impl FunctionStarts for KernelStarts {
    fn starts(&mut self, addresses: &[u64]) -> Result<Vec<Option<u64>>> {
        let namer = match &mut self.namer {
            Some(namer) => namer,
            None => self.namer.insert(KernelNamer::load()?),
        };
        let functions = namer.functions(addresses)?;
        Ok(functions.into_iter().map(|function| function.and_then(|function| function.start)).collect())
    }
}

/// Kernel addresses remembered at most: a recording meets a few thousand.
const MAX_KNOWN: usize = 1 << 16;

/// Where the function of each kernel address seen starts, asked once per address.
pub struct KernelFunctions {
    source: Box<dyn FunctionStarts>,
    /// Each kernel address seen, to its function's start (to itself where none is known).
    known: FxHashMap<u64, u64>,
    /// Scratch: the addresses of a stack not known yet.
    unknown: Vec<u64>,
    /// The source failed once: frames are left where they are from then on (named alike,
    /// only more of them).
    failed: bool,
}

impl std::fmt::Debug for KernelFunctions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelFunctions")
            .field("known", &self.known.len())
            .field("failed", &self.failed)
            .finish()
    }
}

impl KernelFunctions {
    pub fn new(source: Box<dyn FunctionStarts>) -> Self {
        Self { source, known: FxHashMap::default(), unknown: Vec::new(), failed: false }
    }

    /// The same source, every address to be asked again.
    pub fn afresh(self) -> Self {
        Self::new(self.source)
    }

    /// Asks where the functions of the kernel frames of `frames` not known yet start, in one go.
    pub fn learn(&mut self, frames: &[Frame]) {
        if self.failed {
            return;
        }
        self.unknown.clear();
        self.unknown.extend(frames.iter().filter_map(|frame| match *frame {
            Frame::Kernel(address) if !self.known.contains_key(&address) => Some(address),
            _ => None,
        }));
        if self.unknown.is_empty() {
            return;
        }
        self.unknown.sort_unstable();
        self.unknown.dedup();
        let Ok(starts) = self.source.starts(&self.unknown) else {
            self.failed = true;
            return;
        };
        if self.known.len() + self.unknown.len() > MAX_KNOWN {
            self.known.clear();
        }
        for (&address, start) in self.unknown.iter().zip(starts) {
            self.known.insert(address, start.unwrap_or(address));
        }
    }

    /// `frame`, at its function's start if it is a kernel frame [`Self::learn`] was told of.
    pub fn placed(&self, frame: Frame) -> Frame {
        match frame {
            Frame::Kernel(address) => Frame::Kernel(self.known.get(&address).copied().unwrap_or(address)),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    /// Functions 0x100 bytes long from 0x1000 up; nothing below. Counts the addresses asked.
    struct Table {
        asked: Arc<AtomicUsize>,
        fails: bool,
    }

    impl FunctionStarts for Table {
        fn starts(&mut self, addresses: &[u64]) -> Result<Vec<Option<u64>>> {
            anyhow::ensure!(!self.fails, "the kernel cannot be asked");
            self.asked.fetch_add(addresses.len(), Ordering::Relaxed);
            Ok(addresses.iter().map(|&address| (address >= 0x1000).then_some(address & !0xff)).collect())
        }
    }

    fn functions(fails: bool) -> (KernelFunctions, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        (KernelFunctions::new(Box::new(Table { asked: asked.clone(), fails })), asked)
    }

    /// `frames`, learnt then placed.
    fn place(functions: &mut KernelFunctions, frames: &[Frame]) -> Vec<Frame> {
        functions.learn(frames);
        frames.iter().map(|&frame| functions.placed(frame)).collect()
    }

    #[test]
    fn kernel_frames_in_one_function_become_one_frame_asked_once() {
        let (mut functions, asked) = functions(false);
        let user = Frame::Anonymous { tgid: crate::model::Tgid(1), addr: 0x1010 };
        let first = [Frame::Kernel(0x1010), Frame::Kernel(0x2020), Frame::Kernel(0x1010), user];
        assert_eq!(
            place(&mut functions, &first),
            [Frame::Kernel(0x1000), Frame::Kernel(0x2000), Frame::Kernel(0x1000), user]
        );
        assert_eq!(asked.load(Ordering::Relaxed), 2, "each address asked once");
        let second = [Frame::Kernel(0x10ff), Frame::Kernel(0x2020), Frame::Kernel(0x500)];
        assert_eq!(
            place(&mut functions, &second),
            [Frame::Kernel(0x1000), Frame::Kernel(0x2000), Frame::Kernel(0x500)]
        );
        assert_eq!(asked.load(Ordering::Relaxed), 4, "only the new ones; none known stays put");
        let mut functions = functions.afresh();
        assert_eq!(place(&mut functions, &second[..1]), [Frame::Kernel(0x1000)]);
        assert_eq!(asked.load(Ordering::Relaxed), 5, "afresh, asked again");
    }

    #[test]
    fn a_source_that_fails_leaves_frames_where_they_are() {
        let (mut functions, _) = functions(true);
        assert_eq!(place(&mut functions, &[Frame::Kernel(0x1010)]), [Frame::Kernel(0x1010)]);
        assert_eq!(place(&mut functions, &[Frame::Kernel(0x1010)]), [Frame::Kernel(0x1010)]);
    }
}
