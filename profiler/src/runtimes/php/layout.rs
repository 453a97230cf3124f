//! Where the Zend Engine keeps what names a frame, per release (docs/php-layouts.md §4, §5, §8,
//! measured on Debian's 8.2 and 8.4); other releases are not read.

/// What differs between the releases read: the tail of `zend_op_array`.
#[derive(Debug)]
pub(super) struct Layout {
    /// `op_array.last` (u32): its ops.
    pub ops_count: u64,
    /// `op_array.opcodes`.
    pub ops: u64,
    /// `op_array.filename` (`zend_string *`).
    pub filename: u64,
    /// `op_array.line_start` (u32).
    pub line_start: u64,
}

static PHP_8_2: Layout = Layout { ops_count: 80, ops: 88, filename: 152, line_start: 160 };
static PHP_8_4: Layout = Layout { ops_count: 96, ops: 104, filename: 168, line_start: 176 };

pub(super) fn layout(major: u32, minor: u32) -> Option<&'static Layout> {
    match (major, minor) {
        (8, 2) => Some(&PHP_8_2),
        (8, 4) => Some(&PHP_8_4),
        _ => None,
    }
}

/// `zend_function`'s common head: `type` (u8), `function_name`, `scope`.
pub(super) const FUNCTION_TYPE: u64 = 0;
pub(super) const FUNCTION_NAME: u64 = 8;
pub(super) const FUNCTION_SCOPE: u64 = 16;
/// `zend_function.type` values.
pub(super) const INTERNAL_FUNCTION: u8 = 1;
pub(super) const USER_FUNCTION: u8 = 2;
pub(super) const EVAL_CODE: u8 = 4;
/// `zend_class_entry.name`.
pub(super) const CLASS_NAME: u64 = 8;
/// `zend_string`: its length and its bytes.
pub(super) const STRING_LENGTH: u64 = 16;
pub(super) const STRING_BYTES: u64 = 24;
/// `zend_op`: its size, and its line (u32).
pub(super) const OP_BYTES: u64 = 32;
pub(super) const OP_LINE: u64 = 24;
