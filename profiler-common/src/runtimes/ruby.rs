//! CRuby's records: what the kernel is told of a process running it ([`RubyProcess`]) and the
//! control frames it reads of a sample ([`RubyFrame`]). Ruby keeps its frames on a VM stack of
//! its own, which changes with every call, so they are read at sample time; what they point to
//! (instruction sequences, method entries) lives on and is named by userspace.
use super::{ProcessRecord, RuntimeKind};

/// Deepest Ruby stack recorded, in control frames; a deeper one is cut there, its outermost
/// frames left out, and marked [`super::RuntimeWalk::Truncated`].
pub const MAX_RUBY_FRAMES: usize = 512;

/// One control frame (`rb_control_frame_t`), as the eBPF program read it at sample time.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RubyFrame {
    /// The instruction sequence (`rb_iseq_t *`) a Ruby frame runs; 0 for a C frame.
    pub iseq: u64,
    /// The frame's method entry (`rb_callable_method_entry_t *`): what names a C frame, and
    /// qualifies a Ruby frame's name with its class; 0 when it has none (a class body, the top
    /// level) or it was not found.
    pub method: u64,
    /// Where a Ruby frame is in its instruction sequence (`cfp->pc`, 8-byte aligned), with
    /// [`ruby_frame_flags`] in its low bits.
    pub pc_flags: u64,
}

/// Bits of [`RubyFrame::pc_flags`] below the program counter.
pub mod ruby_frame_flags {
    /// The first frame pushed by a native call of the VM (`rb_vm_exec`), which the run of frames
    /// from the previous one's to this one replaces (`VM_FRAME_FLAG_FINISH`).
    pub const RUN_END: u64 = 1 << 0;
    /// A C function's frame (`VM_FRAME_FLAG_CFRAME`).
    pub const C_FRAME: u64 = 1 << 1;
    /// Not a frame but what the thread was doing besides running its frames: one of
    /// [`thread_states`], shifted by [`THREAD_STATE_SHIFT`], in place of a program counter.
    pub const THREAD_STATE: u64 = 1 << 2;
    pub const THREAD_STATE_SHIFT: u32 = 3;
    pub const MASK: u64 = 7;
}

/// What a thread was doing besides running its frames, in a [`ruby_frame_flags::THREAD_STATE`]
/// record.
pub mod thread_states {
    /// Collecting garbage: its innermost Ruby frame allocated.
    pub const IN_GC: u64 = 1;
    /// Waiting for the GVL.
    pub const WAITING_FOR_GVL: u64 = 2;
}

/// The data of a [`super::RuntimeProcess`] of kind Ruby: where a thread's execution context is,
/// the size of its release's control frames, and where the VM says it collects garbage.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RubyProcess {
    /// Where `ruby_current_ec` is from the thread pointer (libruby's static TLS block).
    pub ec_offset: i64,
    /// `sizeof(rb_control_frame_t)`: 64 up to 3.2, 56 from 3.3.
    pub control_frame_bytes: u32,
    /// `rb_vm_t.objspace`, whose `flags` word has [`RubyProcess::DURING_GC`].
    pub vm_objspace: u32,
    /// The main Ractor's GVL holder (`rb_thread_t *`): 3.1's `threads.gvl.owner`, 3.3's
    /// `threads.sched.running`.
    pub ractor_gvl_owner: u32,
    /// `rb_thread_t.status` (its low bits: [`RubyProcess::RUNNABLE`] and others).
    pub thread_status: u32,
    /// `rb_thread_t.blocking_region_buffer`: set while the thread runs without the GVL on purpose.
    pub thread_blocking_region: u32,
    pub _pad: u32,
    /// `&ruby_current_vm_ptr` in the process.
    pub vm_ptr: u64,
}

impl RubyProcess {
    /// `rb_objspace_t.flags`, and its `during_gc` bit.
    pub const OBJSPACE_FLAGS: u64 = 16;
    pub const DURING_GC: u32 = 1 << 5;
    /// `rb_vm_t.ractor.main_ractor`.
    pub const VM_MAIN_RACTOR: u64 = 32;
    /// `rb_thread_t.status`'s bits, and its value for a thread that runs or wants to.
    pub const STATUS_MASK: u64 = 3;
    pub const RUNNABLE: u64 = 0;
    /// `rb_execution_context_t.thread_ptr`: the `rb_thread_t` whose context it is.
    pub const EC_THREAD: u64 = 48;
}

/// Most bytes of Ruby frame records in a sample.
pub const MAX_FRAMES_BYTES: usize = MAX_RUBY_FRAMES * core::mem::size_of::<RubyFrame>();

// SAFETY: a `repr(C)` record of integers, every bit pattern of which is one.
unsafe impl ProcessRecord for RubyProcess {
    const KIND: RuntimeKind = RuntimeKind::Ruby;
}
