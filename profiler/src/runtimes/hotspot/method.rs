//! A Java method's name, source file and line table, read from its `Method` in the target:
//! `Method` → `ConstMethod` (indexes into the constant pool, the bytecodes, the line table right
//! after them) → `ConstantPool` (the class, and `Symbol`s at those indexes) → `Klass::_name`.
use super::{debug_info, layout::Layout};
use crate::runtimes::memory::{ReadMemory, pointer, read_bytes, read_u64};

/// Longest symbol taken (class names, method names, file names).
const MAX_SYMBOL: usize = 4096;
/// Most bytes of line table read (a few per line).
const MAX_LINE_TABLE: usize = 16 * 1024;
/// Methods of a class looked at, at most, for others of the same name.
const MAX_CLASS_METHODS: usize = 1024;
/// The line table is read in pieces of this size until its end marker.
const LINE_TABLE_PIECE: usize = 512;
const SMALL_PIECE: usize = 16;

/// What names a method's frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MethodInfo {
    /// `package.Class.method`.
    pub name: String,
    /// The class's source file (`Shares.java`), or empty.
    pub file: String,
    pub const_method: u64,
    /// Where its bytecodes start: a bcp minus this is a bci.
    pub bytecodes: u64,
    pub code_size: u64,
    pub lines: Vec<(u32, u32)>,
}

impl MethodInfo {
    /// About the bytes it holds.
    pub(crate) fn size(&self) -> usize {
        64 + self.name.len() + self.file.len() + 8 * self.lines.len()
    }

    /// The line of bytecode index `bci`, 0 when unknown.
    pub(crate) fn line(&self, bci: i32) -> u32 {
        debug_info::line_of(&self.lines, bci).unwrap_or(0)
    }

    /// The bci of bytecode pointer `bcp`, if it points into this method's bytecodes.
    pub(crate) fn bci(&self, bcp: u64) -> Option<i32> {
        let bci = bcp.checked_sub(self.bytecodes)?;
        (bci < self.code_size).then_some(bci as i32)
    }
}

/// Reads the method at `method`.
pub(crate) fn read(layout: &Layout, method: u64, read: &mut ReadMemory<'_>) -> Option<MethodInfo> {
    let object = read_bytes(read, method, layout.method_const_method.offset + 8)?;
    let const_method = pointer(layout.method_const_method.get_u64(&object)?)?;
    let object = read_bytes(read, const_method, layout.const_method_size as usize)?;
    let field = |int: super::layout::Int| int.get_u64(&object);
    let pool = pointer(field(layout.const_method_constants)?)?;
    let flags = field(layout.const_method_flags)?;
    let code_size = field(layout.const_method_code_size)?;
    let name_index = field(layout.const_method_name_index)?;
    let pool_object = read_bytes(read, pool, layout.pool_size as usize)?;
    let length = layout.pool_length.get_u64(&pool_object)?;
    let slot = |read: &mut ReadMemory<'_>, index: u64| -> Option<String> {
        (index > 0 && index < length).then_some(())?;
        let symbol = read_u64(read, pool.checked_add(index.checked_mul(8)?.checked_add(layout.pool_size)?)?)?;
        read_symbol(layout, read, symbol & !1)
    };
    let holder = pointer(layout.pool_holder.get_u64(&pool_object)?)?;
    let klass = read_bytes(read, holder, layout.klass_name.offset + 8)?;
    let class = read_symbol(layout, read, layout.klass_name.get_u64(&klass)?)?;
    let mut method_name = slot(read, name_index)?;
    if let Some(overloads) = layout.overloads
        && overloaded(layout, &overloads, holder, method, name_index, read) == Some(true)
        && let Some(signature) = field(overloads.signature_index).and_then(|index| slot(read, index))
    {
        method_name.push_str(&signature);
    }
    let file = layout.pool_source_file_index.get_u64(&pool_object).and_then(|index| slot(read, index));
    let bytecodes = const_method + layout.const_method_size;
    let lines = if flags & u64::from(layout.has_line_table) != 0 {
        read_line_table(read, bytecodes + code_size, layout.unsigned5_base)
    } else {
        Vec::new()
    };
    Some(MethodInfo {
        name: format!("{}.{method_name}", class_name(&class)),
        file: file.unwrap_or_default(),
        const_method,
        bytecodes,
        code_size,
        lines,
    })
}

/// Whether class `holder` has another method than `method` named by the same constant pool
/// entry `name_index` (overloads: `alpha(J)J` and `alpha(I)I`); `None` when that cannot be
/// told (a class too large, memory that cannot be read).
fn overloaded(
    layout: &Layout,
    overloads: &super::layout::Overloads,
    holder: u64,
    method: u64,
    name_index: u64,
    read: &mut ReadMemory<'_>,
) -> Option<bool> {
    let at = holder.checked_add(overloads.klass_methods.offset as u64)?;
    let array = pointer(read_u64(read, at)?)?;
    let header = read_bytes(read, array, overloads.array_length.end())?;
    let length = overloads.array_length.get_u64(&header)? as usize;
    if length > MAX_CLASS_METHODS {
        return None;
    }
    let methods = read_bytes(read, array.checked_add(overloads.array_data as u64)?, 8 * length)?;
    let name_field = layout.const_method_name_index;
    for other in methods.as_chunks::<8>().0.iter().map(|word| u64::from_le_bytes(*word)) {
        if other == method {
            continue;
        }
        let Some(const_method) = pointer(other)
            .and_then(|other| read_u64(read, other.checked_add(layout.method_const_method.offset as u64)?))
            .and_then(pointer)
        else {
            continue;
        };
        let object = read_bytes(read, const_method, name_field.end());
        if object.and_then(|object| name_field.get_u64(&object)) == Some(name_index) {
            return Some(true);
        }
    }
    Some(false)
}

/// A class's name as Java writes it: dots for slashes, and a hidden class's address (lambdas:
/// `Shares$$Lambda+0x00007f...`) left out, or every JVM would have names of its own.
pub(crate) fn class_name(internal: &str) -> String {
    let name = match internal.find("+0x") {
        Some(at) => &internal[..at],
        None => internal,
    };
    name.replace('/', ".")
}

/// The line table at `at`, read a piece at a time until its end marker (smaller pieces near
/// the end of readable memory).
fn read_line_table(read: &mut ReadMemory<'_>, at: u64, base: u8) -> Vec<(u32, u32)> {
    let mut bytes = Vec::new();
    let mut piece = LINE_TABLE_PIECE;
    while bytes.len() < MAX_LINE_TABLE {
        let (table, ended) = debug_info::line_table(&bytes, base);
        if ended {
            return table;
        }
        let Some(address) = at.checked_add(bytes.len() as u64) else { break };
        let start = bytes.len();
        bytes.resize(start + piece, 0);
        if !read(address, &mut bytes[start..]) {
            bytes.truncate(start);
            if piece == SMALL_PIECE {
                break;
            }
            piece = SMALL_PIECE;
        }
    }
    debug_info::line_table(&bytes, base).0
}

fn read_symbol(layout: &Layout, read: &mut ReadMemory<'_>, symbol: u64) -> Option<String> {
    let symbol = pointer(symbol)?;
    let header = read_bytes(read, symbol, layout.symbol_body)?;
    let length = (layout.symbol_length.get_u64(&header)? as usize).min(MAX_SYMBOL);
    let body = read_bytes(read, symbol.checked_add(layout.symbol_body as u64)?, length)?;
    // Modified UTF-8: close enough to UTF-8 for names; anything else is shown escaped.
    Some(String::from_utf8_lossy(&body).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_dotted_without_hidden_addresses() {
        assert_eq!(class_name("java/lang/Thread"), "java.lang.Thread");
        assert_eq!(class_name("Shares$$Lambda+0x00007f0001234567"), "Shares$$Lambda");
        assert_eq!(class_name("Shares"), "Shares");
    }
}
