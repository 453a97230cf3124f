//! Perl's records: what the kernel is told of a process running a threaded Perl 5 interpreter
//! ([`PerlProcess`]) and what it reads of a sample's context stack ([`PerlFrame`]). Perl keeps its
//! frames as contexts (`PERL_CONTEXT`) on a stack of each interpreter's own, rewritten by every
//! call, so they are read at sample time; the subs and statements they point to live on and are
//! named by userspace. Every offset is the same in 5.36 and 5.42 (docs/perl-layouts.md §7).
use super::{ProcessRecord, RuntimeKind};

/// Most records of a sample (frames and the markers between them); a deeper stack is cut there,
/// its outermost frames left out, and marked [`super::RuntimeWalk::Truncated`].
pub const MAX_PERL_FRAMES: usize = 512;

/// A context of the thread's context stack, or a marker of where the stack changes (one of
/// [`perl_frame_flags`]), innermost first, as the eBPF program read it at sample time.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerlFrame {
    /// A sub's or format's context: the code it runs (`CV *`). A `require`'s: the name of the
    /// file it loads (`SV *`). 0 otherwise.
    pub code: u64,
    /// The statement the frame is at (`COP *`): the innermost frame's current one, an outer
    /// frame's the one it called the next inner frame from.
    pub statement: u64,
    /// The context's type (`cx_type`: `CXt_*` and its flags); at a stackinfo's end, its
    /// outermost context's, or [`PerlFrame::NO_CONTEXT`].
    pub context: u16,
    /// At a stackinfo's end: its type (`si_type`, a `PERLSI_*`).
    pub stackinfo: i16,
    /// Bit set of [`perl_frame_flags`].
    pub flags: u32,
}

impl PerlFrame {
    /// [`PerlFrame::context`] of a stackinfo that held none.
    pub const NO_CONTEXT: u16 = 0xffff;
}

/// Bits of [`PerlFrame::flags`].
pub mod perl_frame_flags {
    /// A sub's, format's or eval's context, whose return leaves the op loop (`retop` NULL): C
    /// code called it, or it is the last op of a `sort` block.
    pub const RETURNS_TO_C: u32 = 1 << 0;
    /// Not a frame: a `sort` block's context (`CXt_NULL`), which makes the frame just inside it
    /// return to the sort, not to C.
    pub const SORT_BLOCK: u32 = 1 << 1;
    /// Not a frame: the end of a stackinfo, which C code pushed (or, for the main one, Perl
    /// started the thread with). [`super::PerlFrame::statement`] is where the walk was.
    pub const STACKINFO_END: u32 = 1 << 2;
}

/// The data of a [`super::RuntimeProcess`] of kind Perl: where a thread's interpreter is.
#[repr(C)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerlProcess {
    /// Where `PL_current_context` (the thread's `PerlInterpreter *`) is from the thread pointer.
    pub interpreter_offset: i64,
}

impl PerlProcess {
    /// `PerlInterpreter`'s `Icurcop` (the current statement) and, just after, `Icurstackinfo`.
    pub const INTERPRETER_CURCOP: u64 = 0xd0;
    pub const INTERPRETER_CURSTACKINFO: u64 = 0xe0;
    /// `struct stackinfo`: `si_cxstack`, `si_prev`, `si_cxix`, `si_cxmax`, `si_type`.
    pub const STACKINFO_CONTEXTS: u32 = 8;
    pub const STACKINFO_PREV: u32 = 16;
    pub const STACKINFO_INDEX: u32 = 32;
    pub const STACKINFO_MAX: u32 = 36;
    pub const STACKINFO_TYPE: u32 = 44;
    /// `si_type` of the stackinfo a thread starts with.
    pub const STACKINFO_MAIN: i32 = 1;
    /// `sizeof(PERL_CONTEXT)`, and its fields: `cx_type` (u8), `blk_oldcop`, `blk_sub.retop`,
    /// `blk_sub.cv`, `blk_eval.cur_text`.
    pub const CONTEXT_BYTES: u64 = 0x68;
    pub const CONTEXT_OLDCOP: u32 = 16;
    pub const CONTEXT_RETOP: u32 = 48;
    pub const CONTEXT_CV: u32 = 72;
    pub const CONTEXT_EVAL_TEXT: u32 = 80;
    /// `cx_type`'s type (`CXTYPEMASK`) and the types read.
    pub const CONTEXT_TYPE_MASK: u8 = 0xf;
    pub const CXT_NULL: u8 = 0;
    pub const CXT_SUB: u8 = 9;
    pub const CXT_FORMAT: u8 = 10;
    pub const CXT_EVAL: u8 = 11;
    /// A sub context Perl pushes again for a regex's code block (`CXp_SUB_RE_FAKE`): no frame.
    pub const CXP_SUB_RE_FAKE: u8 = 0x80;
    /// An eval context's flags (`CXp_REAL`, `CXp_EVALBLOCK`, `CXp_TRY`): none for a `require`.
    pub const CXP_EVAL_KINDS: u8 = 0xe0;
}

/// Most bytes of Perl frame records in a sample.
pub const MAX_FRAMES_BYTES: usize = MAX_PERL_FRAMES * core::mem::size_of::<PerlFrame>();

// SAFETY: a `repr(C)` record of integers, every bit pattern of which is one.
unsafe impl ProcessRecord for PerlProcess {
    const KIND: RuntimeKind = RuntimeKind::Perl;
}
