//! What names a Ruby frame, read from the target's memory by the addresses the kernel's walk
//! recorded: a Ruby frame's instruction sequence (its labels, file, and the line of any of its
//! instructions) and a frame's method entry (its name and its class's path), joined into the
//! label Ruby's `rb_profile_frame_full_label` gives (docs/ruby-layouts.md §3.4, §4). Everything
//! read is the target's, and may have been freed or moved by its collector since the sample:
//! each object's type tag is checked before its fields are believed, every length and count is
//! bounded before anything is read or kept by it, and a reader never loops on what it reads.
mod class_path;
#[cfg(any(test, feature = "testing"))]
pub mod fixture;
mod line_table;
mod objects;
mod symbols;
#[cfg(test)]
mod tests;

use anyhow::{Context as _, Result, ensure};

use self::{
    class_path::class_path,
    line_table::LineTable,
    objects::{Heap, expect_type, i32_at, type_of, u32_at, u64_at},
    symbols::id_name,
};
use super::layout::{
    BODY_BASE_LABEL, BODY_FIRST_LINE, BODY_LABEL, BODY_PATH, BODY_TYPE, DEFINITION_BYTES, DEFINITION_ISEQ,
    DEFINITION_ORIGINAL_ID, DEFINITION_TYPE_MASK, ENTRY_DEFINED_CLASS, ENTRY_DEFINITION, ENTRY_OWNER,
    FirstLine, IMEMO_ISEQ, IMEMO_MENT, ISEQ_BODY, Layout, MAX_BODY_TYPE, METHOD_TYPE_CFUNC, METHOD_TYPE_ISEQ,
    T_ARRAY, T_STRING,
};

/// An instruction sequence as named in a profile.
#[derive(Debug)]
pub(super) struct Iseq {
    /// `location.label`: "deep", "block in run", "<main>".
    pub label: String,
    /// `location.base_label`: the method's name for a method and its blocks.
    pub base_label: String,
    /// The path it was loaded by (`pathobj`, or its first element).
    pub path: String,
    pub first_line: u32,
    /// The sequence of its method (itself for a method), or of whatever its blocks are in.
    pub local_iseq: u64,
    lines: LineTable,
}

impl Iseq {
    /// The line of the instruction a frame at `pc` (its `cfp->pc`) runs; `None` when `pc` is not
    /// in the sequence or its instruction has no line.
    pub(super) fn line(&self, pc: u64) -> Option<u32> {
        self.lines.line(pc, self.first_line)
    }

    /// About the bytes it holds, for a cache's budget.
    pub(super) fn size(&self) -> usize {
        size_of::<Self>() + self.label.len() + self.base_label.len() + self.path.len() + self.lines.size()
    }
}

/// Reads the instruction sequence (`rb_iseq_t`) at `iseq` with `read`.
pub(super) fn read_iseq(
    read: &mut dyn FnMut(u64, &mut [u8]) -> anyhow::Result<()>,
    layout: &Layout,
    iseq: u64,
) -> anyhow::Result<Iseq> {
    let mut heap = Heap::new(read, layout);
    read_iseq_from(&mut heap, iseq).with_context(|| format!("the instruction sequence at {iseq:#x}"))
}

fn read_iseq_from(heap: &mut Heap<'_>, iseq: u64) -> Result<Iseq> {
    let header = heap.imemo(iseq, IMEMO_ISEQ)?;
    let body_at = u64_at(&header, ISEQ_BODY);
    let body = heap.bytes(body_at, body_bytes(heap.layout)).context("its body")?;
    let kind = u32_at(&body, BODY_TYPE);
    ensure!(kind <= MAX_BODY_TYPE, "its body at {body_at:#x} is of type {kind}");
    Ok(Iseq {
        label: heap.string(u64_at(&body, BODY_LABEL)).context("its label")?,
        base_label: heap.string(u64_at(&body, BODY_BASE_LABEL)).context("its base label")?,
        path: path(heap, u64_at(&body, BODY_PATH)).context("its path")?,
        first_line: first_line(heap.layout, &body)?,
        local_iseq: u64_at(&body, heap.layout.body.local_iseq),
        lines: LineTable::read(heap, &body)?,
    })
}

/// The bytes of a body that hold every field read.
fn body_bytes(layout: &Layout) -> usize {
    let body = &layout.body;
    let last =
        [BODY_FIRST_LINE, body.insns_info, body.insns_info_size, body.succ_index_table, body.local_iseq];
    last.into_iter().max().unwrap_or(0) as usize + 8
}

/// The path in `pathobj`: a String, or an Array of the path and the real path.
fn path(heap: &mut Heap<'_>, pathobj: u64) -> Result<String> {
    let header = heap.header(pathobj)?;
    expect_type(pathobj, &header, &[T_STRING, T_ARRAY])?;
    if type_of(&header) == T_STRING {
        return heap.string_of(pathobj, &header);
    }
    let path = heap.array_entry_of(pathobj, &header, 0)?;
    heap.string(path)
}

/// `location.first_lineno`; 0 when it is out of range.
fn first_line(layout: &Layout, body: &[u8]) -> Result<u32> {
    let line = match layout.body.first_line {
        FirstLine::Fixnum => {
            let value = u64_at(body, BODY_FIRST_LINE);
            ensure!(value & 1 == 1, "its first line {value:#x} is no Fixnum");
            (value as i64) >> 1
        }
        FirstLine::Int => i64::from(i32_at(body, BODY_FIRST_LINE)),
    };
    Ok(u32::try_from(line).unwrap_or(0))
}

/// A method entry (`rb_callable_method_entry_t`) named: its class path and kind of receiver,
/// and its method name.
#[derive(Debug)]
pub(super) struct Method {
    /// The class path, e.g. "Outer::Worker", "Integer"; `None` when it could not be read (or
    /// is an object's own singleton class).
    pub owner: Option<String>,
    /// A singleton method (`Outer::Worker.start`); false when `owner` is `None`.
    pub singleton: bool,
    /// `def->original_id`'s name.
    pub name: String,
    pub is_cfunc: bool,
    /// The instruction sequence of a method defined in Ruby (`def->body.iseq.iseqptr`).
    iseq: Option<u64>,
}

impl Method {
    /// "Outer::Worker#deep", "Outer::Worker.start", or the bare name when the class is unknown.
    fn qualified_name(&self) -> String {
        match &self.owner {
            Some(owner) => format!("{owner}{}{}", if self.singleton { '.' } else { '#' }, self.name),
            None => self.name.clone(),
        }
    }
}

/// Reads the method entry at `method_entry` with `read`, naming IDs through the table at
/// `symbols` (`&ruby_global_symbols` in the process). A class path that cannot be read leaves
/// `owner` out; a name that cannot be, the whole entry.
pub(super) fn read_method(
    read: &mut dyn FnMut(u64, &mut [u8]) -> anyhow::Result<()>,
    layout: &Layout,
    symbols: u64,
    method_entry: u64,
) -> anyhow::Result<Method> {
    let mut heap = Heap::new(read, layout);
    read_method_from(&mut heap, symbols, method_entry)
        .with_context(|| format!("the method entry at {method_entry:#x}"))
}

fn read_method_from(heap: &mut Heap<'_>, symbols: u64, method_entry: u64) -> Result<Method> {
    let entry = heap.imemo(method_entry, IMEMO_MENT)?;
    let definition_at = u64_at(&entry, ENTRY_DEFINITION);
    let definition: [u8; DEFINITION_BYTES] = heap.array(definition_at).context("its definition")?;
    let kind = definition[0] & DEFINITION_TYPE_MASK;
    let name = id_name(heap, symbols, u64_at(&definition, DEFINITION_ORIGINAL_ID)).context("its name")?;
    let is_cfunc = kind == METHOD_TYPE_CFUNC;
    // A C method by the class or module that defines it (as rbspy names them), a Ruby one as
    // Ruby's own profiling names it.
    let class = u64_at(&entry, if is_cfunc { ENTRY_OWNER } else { ENTRY_DEFINED_CLASS });
    let class = class_path(heap, symbols, class).ok();
    Ok(Method {
        singleton: class.as_ref().is_some_and(|class| class.singleton),
        owner: class.map(|class| class.path),
        name,
        is_cfunc,
        iseq: (kind == METHOD_TYPE_ISEQ).then(|| u64_at(&definition, DEFINITION_ISEQ)),
    })
}

/// The full label as `rb_profile_frame_full_label` gives it: "Outer::Worker#deep",
/// "Outer::Worker.start", "block in Outer::Worker#run", "<main>"; for a C method
/// "Integer#times". A Ruby frame is qualified by its method entry only when the entry's method
/// is the one the sequence is in (a block in `define_method` is not in the method it defines);
/// empty when there is neither.
pub(super) fn full_label(iseq: Option<&Iseq>, method: Option<&Method>) -> String {
    match (iseq, method) {
        (_, Some(method)) if method.is_cfunc => method.qualified_name(),
        (Some(iseq), Some(method)) if method.owner.is_some() && method.iseq == Some(iseq.local_iseq) => {
            // "block in run" is "block in " and the method's base label.
            match iseq.label.strip_suffix(iseq.base_label.as_str()) {
                Some(prefix) => format!("{prefix}{}", method.qualified_name()),
                None => iseq.label.clone(),
            }
        }
        (Some(iseq), _) => iseq.label.clone(),
        (None, Some(method)) => method.qualified_name(),
        (None, None) => String::new(),
    }
}
