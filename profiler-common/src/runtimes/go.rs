//! Go's records: what the kernel is told of a process running Go ([`GoProcess`]) and what it
//! reads of a sample ([`GoSample`]): the pprof labels of the goroutine the thread runs
//! (`pprof.Do`, `pprof.SetGoroutineLabels`), which change as soon as it runs another, so that
//! userspace could not read them later; and, when the thread left the goroutine's stack for its
//! own (C code called through cgo, the runtime's work on the thread's stack), a copy of the
//! goroutine's stack, which is not where the thread's stack pointer is. Go's frames themselves
//! are stepped and named in userspace.
use super::{ProcessRecord, RuntimeKind};

/// Most labels read of a goroutine; a set with more is marked [`GoLabels::truncated`].
pub const MAX_GO_LABELS: usize = 8;
/// Most bytes read of a label's key, and of its value; longer ones are cut.
pub const MAX_GO_LABEL_BYTES: usize = 56;
/// Most bytes copied of a goroutine's stack, from where it stopped up: as much as of a thread's
/// (`--stack-size`: a parser's recursion takes more than 8 KiB); a deeper one's outermost frames
/// are cut. Only what there is is sent.
pub const MAX_GOROUTINE_STACK_BYTES: usize = crate::MAX_STACK_COPY;

/// How a Go release keeps a goroutine's labels behind `g.labels`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoLabelsLayout {
    /// Up to Go 1.23: a `map[string]string` (a pointer to its `hmap`), a classic Go map.
    Map = 0,
    /// Go 1.24+: a slice of `{key, value string}`, sorted by key.
    Slice = 1,
}

/// The data of a [`super::RuntimeProcess`] of kind Go: where its threads' goroutine is, and
/// where a goroutine's labels are, in its release's structures (bytes).
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoProcess {
    /// Where a thread's current `g` is, from its thread pointer (-8 in every link mode unless C
    /// code in the executable has thread-local variables of its own).
    pub g_offset: i64,
    /// `g.m`: the thread (`m`) running the goroutine.
    pub g_m: u32,
    /// `m.curg`: the user goroutine the thread runs (`g` may be its `g0` or signal stack's).
    pub m_curg: u32,
    /// `g.labels`.
    pub g_labels: u32,
    /// A [`GoLabelsLayout`].
    pub labels_layout: u32,
    /// `g.sched`: where a goroutine stopped when its thread last switched away from it (a
    /// `gobuf`: its stack pointer first, then its PC).
    pub g_sched: u32,
    /// `gobuf.bp`, in `g.sched`.
    pub gobuf_bp: u32,
}

// SAFETY: a `repr(C)` record of integers, every bit pattern of which is one.
unsafe impl ProcessRecord for GoProcess {
    const KIND: RuntimeKind = RuntimeKind::Go;
}

/// One label, as read: its key and value, cut to [`MAX_GO_LABEL_BYTES`], and their whole lengths.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoLabel {
    pub key_len: u32,
    pub value_len: u32,
    pub key: [u8; MAX_GO_LABEL_BYTES],
    pub value: [u8; MAX_GO_LABEL_BYTES],
}

/// What the kernel read of a sample of Go: the labels of the goroutine its thread ran, the first
/// `count` of `labels` (in a map's order up to Go 1.23, by key after).
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoLabels {
    pub count: u32,
    /// Nonzero when the goroutine has more labels than were read.
    pub truncated: u32,
    pub labels: [GoLabel; MAX_GO_LABELS],
}

/// Bytes of a [`GoLabels`] record before its labels: what is sent of one without labels.
pub const LABELS_HEADER_BYTES: usize = core::mem::offset_of!(GoLabels, labels);

/// The stack of the goroutine a thread left for its own stack (`m.g0`'s: its scheduling stack,
/// where `systemstack`, `morestack` and cgo's `asmcgocall` move it), from where the goroutine
/// stopped (`g.sched`). Its frames are the callers of the thread's outermost Go frame.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoroutineStack {
    /// `g.sched`: the goroutine's PC, stack pointer and frame pointer.
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
    /// Bytes of `bytes` copied, from `sp` up (0: they could not be read).
    pub len: u32,
    /// Nonzero when the goroutine's stack goes on past them.
    pub truncated: u32,
    pub bytes: [u8; MAX_GOROUTINE_STACK_BYTES],
}

/// What the kernel reads of a sample of Go: its goroutine's labels; then, when its thread was on
/// its own stack, the goroutine's stack. Only what was read is sent: the labels up to the last
/// one when there is no goroutine's stack, and all of them and the stack up to its `len` when
/// there is.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoSample {
    pub labels: GoLabels,
    pub goroutine: GoroutineStack,
}

/// Bytes of a [`GoSample`] record.
pub const SAMPLE_BYTES: usize = size_of::<GoSample>();
/// Where a [`GoSample`]'s goroutine's stack is, and its bytes.
pub const GOROUTINE_OFFSET: usize = core::mem::offset_of!(GoSample, goroutine);
pub const GOROUTINE_BYTES_OFFSET: usize = GOROUTINE_OFFSET + core::mem::offset_of!(GoroutineStack, bytes);
