//! Where CRuby keeps what the profiler reads, per release: the offsets that differ between 3.1
//! and 3.3 in [`Layout`], those that do not as constants. Every value is from
//! docs/ruby-layouts.md (§2.2 threads, §3 control frames and method entries, §4 names, §5 the
//! differences), measured on Debian's builds; 3.2 and 3.4 are known from others' tables only,
//! so they are not read.

/// What differs between the releases read.
#[derive(Debug)]
pub(super) struct Layout {
    /// `sizeof(rb_control_frame_t)`: the stride of the kernel's walk.
    pub control_frame_bytes: u32,
    /// `rb_vm_t.ractor.main_thread`.
    pub vm_main_thread: u64,
    /// `rb_vm_t.objspace`.
    pub vm_objspace: u32,
    /// The main Ractor's GVL holder (see `RubyProcess::ractor_gvl_owner`).
    pub ractor_gvl_owner: u32,
    /// `rb_thread_t.status` and `rb_thread_t.blocking_region_buffer`.
    pub thread_status: u32,
    pub thread_blocking_region: u32,
    /// `rb_thread_t.nt`, where the native thread's ids are (3.3); `None`: in the thread itself.
    pub thread_native: Option<u64>,
    /// The `pthread_t` (the thread pointer on glibc), in the thread or its native thread.
    pub native_thread_id: u64,
    pub string: StringLayout,
    /// `RARRAY_EMBED_LEN_MASK >> RARRAY_EMBED_LEN_SHIFT`.
    pub array_embedded_length_mask: u64,
    pub body: BodyLayout,
    pub class: ClassLayout,
}

/// An `RString`.
#[derive(Debug)]
pub(super) struct StringLayout {
    /// Where an embedded string's length is.
    pub embedded_length: EmbeddedLength,
    /// Where an embedded string's bytes start.
    pub embedded_data: u64,
    /// The longest embedded string: a longer one is no string.
    pub max_embedded: u64,
}

#[derive(Debug)]
pub(super) enum EmbeddedLength {
    /// 3.1: `(flags >> 14) & 0x1f`.
    InFlags,
    /// 3.3: `len` at [`STRING_LENGTH`], as for strings on the heap.
    Field,
}

/// The fields of `rb_iseq_constant_body` that moved.
#[derive(Debug)]
pub(super) struct BodyLayout {
    pub first_line: FirstLine,
    /// `insns_info.body`: the `iseq_insn_info_entry` array.
    pub insns_info: u64,
    /// `insns_info.size` (u32): its entries.
    pub insns_info_size: u64,
    pub succ_index_table: u64,
    pub local_iseq: u64,
}

/// How `location.first_lineno` (at [`BODY_FIRST_LINE`]) is stored.
#[derive(Debug)]
pub(super) enum FirstLine {
    /// 3.1: a Fixnum `VALUE`.
    Fixnum,
    /// 3.3: an `int`.
    Int,
}

/// Where a class keeps its path and, for a singleton class, the object it is attached to.
#[derive(Debug)]
pub(super) enum ClassLayout {
    /// 3.3: fields of the `rb_classext_t` that follows the `RClass`, from the class's address.
    Fields { classpath: u64, attached_object: u64 },
    /// 3.1: hidden instance variables (`__classpath__`, `__attached__`) in the `st_table` at
    /// `iv_tbl` of the `rb_classext_t` that `ext` points to.
    IvarTable { ext: u64, iv_tbl: u64 },
}

static RUBY_3_1: Layout = Layout {
    control_frame_bytes: 64,
    vm_main_thread: 40,
    vm_objspace: 0x450,
    ractor_gvl_owner: 0x150,
    thread_status: 92,
    thread_blocking_region: 168,
    thread_native: None,
    native_thread_id: 80,
    string: StringLayout { embedded_length: EmbeddedLength::InFlags, embedded_data: 16, max_embedded: 23 },
    array_embedded_length_mask: 0x3,
    body: BodyLayout {
        first_line: FirstLine::Fixnum,
        insns_info: 120,
        insns_info_size: 136,
        succ_index_table: 144,
        local_iseq: 176,
    },
    class: ClassLayout::IvarTable { ext: 24, iv_tbl: 8 },
};

static RUBY_3_3: Layout = Layout {
    control_frame_bytes: 56,
    vm_main_thread: 40,
    vm_objspace: 0x518,
    ractor_gvl_owner: 0x148,
    thread_status: 240,
    thread_blocking_region: 248,
    thread_native: Some(40),
    native_thread_id: 16,
    // Embedded in slots of up to 640 bytes, with a NUL after the bytes.
    string: StringLayout {
        embedded_length: EmbeddedLength::Field,
        embedded_data: 24,
        max_embedded: 640 - 24 - 1,
    },
    array_embedded_length_mask: 0x7f,
    body: BodyLayout {
        first_line: FirstLine::Int,
        insns_info: 112,
        insns_info_size: 128,
        succ_index_table: 136,
        local_iseq: 168,
    },
    class: ClassLayout::Fields { classpath: 152, attached_object: 128 },
};

/// The layout of Ruby `major`.`minor`: 3.1 and 3.3, the releases it was measured on.
pub(super) fn layout(major: u32, minor: u32) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 1) => Some(&RUBY_3_1),
        (3, 3) => Some(&RUBY_3_3),
        _ => None,
    }
}

// What 3.1 and 3.3 share.

/// `RBasic`: `flags` at 0, `klass` at 8; the type is the low bits of the flags.
pub(super) const BASIC_KLASS: u64 = 8;
pub(super) const TYPE_MASK: u64 = 0x1f;
pub(super) const T_CLASS: u64 = 0x02;
pub(super) const T_MODULE: u64 = 0x03;
pub(super) const T_STRING: u64 = 0x05;
pub(super) const T_ARRAY: u64 = 0x07;
pub(super) const T_IMEMO: u64 = 0x1a;
pub(super) const T_ICLASS: u64 = 0x1c;
/// An imemo's type: `(flags >> 12) & 0xf`.
pub(super) const IMEMO_TYPE_SHIFT: u64 = 12;
pub(super) const IMEMO_TYPE_MASK: u64 = 0xf;
pub(super) const IMEMO_MENT: u64 = 6;
pub(super) const IMEMO_ISEQ: u64 = 7;
/// `FL_SINGLETON` (`FL_USER0`).
pub(super) const FL_SINGLETON: u64 = 1 << 12;

/// `RString`: `RSTRING_NOEMBED` (`FL_USER1`), and `as.heap`'s `len` and `ptr`.
pub(super) const STRING_NOEMBED: u64 = 1 << 13;
pub(super) const STRING_LENGTH: u64 = 16;
pub(super) const STRING_POINTER: u64 = 24;
/// 3.1's embedded length in the flags.
pub(super) const STRING_EMBEDDED_LENGTH_SHIFT: u64 = 14;
pub(super) const STRING_EMBEDDED_LENGTH_MASK: u64 = 0x1f;

/// `RArray`: `RARRAY_EMBED_FLAG` (`FL_USER1`), the embedded length's shift, where embedded
/// elements are, and `as.heap`'s `len` and `ptr`.
pub(super) const ARRAY_EMBEDDED: u64 = 1 << 13;
pub(super) const ARRAY_EMBEDDED_LENGTH_SHIFT: u64 = 15;
pub(super) const ARRAY_EMBEDDED_ELEMENTS: u64 = 16;
pub(super) const ARRAY_LENGTH: u64 = 16;
pub(super) const ARRAY_POINTER: u64 = 32;

/// `rb_iseq_t.body`.
pub(super) const ISEQ_BODY: u64 = 16;
/// `rb_iseq_constant_body`: `type` (u32), `iseq_size` (u32, in words), `iseq_encoded`, and
/// `location`'s `pathobj`, `base_label`, `label`, `first_lineno`.
pub(super) const BODY_TYPE: u64 = 0;
pub(super) const BODY_ISEQ_SIZE: u64 = 4;
pub(super) const BODY_ISEQ_ENCODED: u64 = 8;
pub(super) const BODY_PATH: u64 = 64;
pub(super) const BODY_BASE_LABEL: u64 = 72;
pub(super) const BODY_LABEL: u64 = 80;
pub(super) const BODY_FIRST_LINE: u64 = 88;
/// The last body type (`ISEQ_TYPE_PLAIN`).
pub(super) const MAX_BODY_TYPE: u32 = 8;
/// `iseq_insn_info_entry`: `line_no` (int) first.
pub(super) const INSN_INFO_BYTES: u64 = 12;

/// `rb_callable_method_entry_t`: `defined_class`, `def`, `owner`.
pub(super) const ENTRY_DEFINED_CLASS: u64 = 8;
pub(super) const ENTRY_DEFINITION: u64 = 16;
pub(super) const ENTRY_OWNER: u64 = 32;
/// `rb_method_definition_t`: `type` in the low 4 bits of its first byte, `body.iseq.iseqptr`,
/// `original_id`.
pub(super) const DEFINITION_TYPE_MASK: u8 = 0xf;
pub(super) const DEFINITION_ISEQ: u64 = 8;
pub(super) const DEFINITION_ORIGINAL_ID: u64 = 32;
pub(super) const DEFINITION_BYTES: usize = 40;
pub(super) const METHOD_TYPE_ISEQ: u8 = 0;
pub(super) const METHOD_TYPE_CFUNC: u8 = 1;

/// `rb_symbols_t` (`ruby_global_symbols`): `last_id` (u32) and `ids`.
pub(super) const SYMBOLS_LAST_ID: u64 = 0;
pub(super) const SYMBOLS_IDS: u64 = 16;
/// IDs up to `tLAST_OP_ID` are their own serial; later ones keep it above 4 bits of scope.
pub(super) const LAST_OP_ID: u64 = 169;
pub(super) const ID_SCOPE_SHIFT: u64 = 4;
/// `ID_SCOPE_MASK`; local names (`__classpath__`, `__attached__`) have scope 0.
pub(super) const ID_SCOPE_MASK: u64 = 0x0e;
/// `ID_ENTRY_UNIT` IDs per chunk of `ids`, `ID_ENTRY_SIZE` elements each (the name first).
pub(super) const ID_ENTRY_UNIT: u64 = 512;
pub(super) const ID_ENTRY_SIZE: u64 = 2;

/// `st_table` (3.1's `iv_tbl`): `entry_power` (u8), `entries_start`, `entries_bound`,
/// `entries`; entries are `{hash, key, record}`, a deleted one's hash all ones.
pub(super) const ST_ENTRY_POWER: u64 = 0;
pub(super) const ST_ENTRIES_START: u64 = 32;
pub(super) const ST_ENTRIES_BOUND: u64 = 40;
pub(super) const ST_ENTRIES: u64 = 48;
pub(super) const ST_TABLE_BYTES: usize = 56;
pub(super) const ST_ENTRY_BYTES: u64 = 24;
pub(super) const ST_DELETED_HASH: u64 = u64::MAX;
