//! The layouts of [`super::layout`] checked against the debug information of every CPython
//! installed here (pyenv's shared libpython builds carry DWARF): a version installed but not in
//! the table, or an offset that differs, fails.
use std::{borrow::Cow, collections::HashMap, path::PathBuf};

use gimli::{AttributeValue, DebuggingInformationEntry, Dwarf, EndianSlice, LittleEndian, UnitOffset};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

use profiler_common::runtimes::python::PythonOffsets;

use super::layout::{self, BYTES_DATA, BYTES_LENGTH, Instruction, LineTable, OB_TYPE, StringLayout, Version};
use super::{debug_offsets, interpreter::Image};
use crate::untrusted::ElfFacts;

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// Struct layouts read from a file's DWARF: struct (or typedef) name -> members by name, each
/// with its offset and the name of its type's struct, and the struct's size.
#[derive(Default)]
struct Structs {
    by_name: HashMap<String, Struct>,
}

#[derive(Default, Clone)]
struct Struct {
    size: u64,
    members: HashMap<String, (u64, Option<String>)>,
}

impl Structs {
    fn read(image: &[u8]) -> Self {
        let file = object::File::parse(image).expect("an ELF file");
        let load = |id: gimli::SectionId| -> Result<Cow<'_, [u8]>, gimli::Error> {
            Ok(file.section_by_name(id.name()).and_then(|s| s.uncompressed_data().ok()).unwrap_or_default())
        };
        let sections = gimli::DwarfSections::load(load).unwrap();
        let dwarf = sections.borrow(|section| EndianSlice::new(section, LittleEndian));
        let mut structs = Structs::default();
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            structs.read_unit(&dwarf, &unit);
        }
        structs
    }

    fn read_unit(&mut self, dwarf: &Dwarf<Reader<'_>>, unit: &gimli::Unit<Reader<'_>>) {
        let mut tree = unit.entries_tree(None).unwrap();
        let root = tree.root().unwrap();
        let mut children = root.children();
        while let Some(node) = children.next().unwrap() {
            let entry = node.entry().clone();
            let is_struct = matches!(entry.tag(), gimli::DW_TAG_structure_type | gimli::DW_TAG_typedef);
            let Some(name) = name(dwarf, unit, &entry) else { continue };
            if !is_struct || self.by_name.get(&name).is_some_and(|known| known.size > 0) {
                continue;
            }
            let described = describe(dwarf, unit, &entry, node);
            if described.size > 0 {
                self.by_name.insert(name, described);
            }
        }
    }

    /// Offset of a dotted member path (`interpreters.main`) in struct `name`.
    fn offset(&self, name: &str, path: &str) -> Option<u64> {
        let mut current = self.by_name.get(name)?;
        let mut total = 0;
        let mut fields = path.split('.').peekable();
        while let Some(field) = fields.next() {
            let (offset, type_name) = current.members.get(field)?;
            total += offset;
            if fields.peek().is_some() {
                current = self.by_name.get(type_name.as_deref()?)?;
            }
        }
        Some(total)
    }

    fn size(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).map(|s| s.size)
    }
}

fn name(
    dwarf: &Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &DebuggingInformationEntry<Reader<'_>>,
) -> Option<String> {
    let value = entry.attr_value(gimli::DW_AT_name)?;
    Some(dwarf.attr_string(unit, value).ok()?.to_string_lossy().into_owned())
}

/// A struct's members, or, for a typedef, the struct it names (followed within the unit).
fn describe(
    dwarf: &Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &DebuggingInformationEntry<Reader<'_>>,
    node: gimli::EntriesTreeNode<'_, '_, Reader<'_>>,
) -> Struct {
    if entry.tag() == gimli::DW_TAG_typedef {
        let Some(target) = type_offset(entry) else { return Struct::default() };
        let Some(target) = struct_at(unit, target) else { return Struct::default() };
        let mut tree = unit.entries_tree(Some(target)).unwrap();
        let root = tree.root().unwrap();
        let entry = root.entry().clone();
        return describe(dwarf, unit, &entry, root);
    }
    let size = match entry.attr_value(gimli::DW_AT_byte_size) {
        Some(AttributeValue::Udata(size)) => size,
        Some(other) => other.udata_value().unwrap_or(0),
        None => 0,
    };
    let mut members = HashMap::new();
    let mut children = node.children();
    while let Some(child) = children.next().unwrap() {
        let member = child.entry();
        if member.tag() != gimli::DW_TAG_member {
            continue;
        }
        let offset =
            member.attr_value(gimli::DW_AT_data_member_location).and_then(|v| v.udata_value()).unwrap_or(0);
        let type_name = type_offset(member).and_then(|t| struct_at(unit, t)).and_then(|t| {
            let entry = unit.entry(t).ok()?;
            name(dwarf, unit, &entry)
        });
        match name(dwarf, unit, member) {
            Some(member_name) => {
                members.insert(member_name, (offset, type_name));
            }
            // An anonymous struct or union: its members are the parent's, moved by its offset.
            None => {
                if let Some(inner) = type_offset(member).and_then(|t| struct_at(unit, t)) {
                    let mut tree = unit.entries_tree(Some(inner)).unwrap();
                    let root = tree.root().unwrap();
                    let entry = root.entry().clone();
                    for (name, (inner_offset, type_name)) in describe(dwarf, unit, &entry, root).members {
                        members.insert(name, (offset + inner_offset, type_name));
                    }
                }
            }
        }
    }
    Struct { size, members }
}

fn type_offset(entry: &DebuggingInformationEntry<Reader<'_>>) -> Option<UnitOffset> {
    match entry.attr_value(gimli::DW_AT_type)? {
        AttributeValue::UnitRef(offset) => Some(offset),
        _ => None,
    }
}

/// The struct or union a type offset leads to, through typedefs and qualifiers.
fn struct_at(unit: &gimli::Unit<Reader<'_>>, mut offset: UnitOffset) -> Option<UnitOffset> {
    for _ in 0..16 {
        let entry = unit.entry(offset).ok()?;
        match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => return Some(offset),
            gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {
                offset = type_offset(&entry)?
            }
            _ => return None,
        }
    }
    None
}

/// pyenv's CPython 3.x installs: (minor version, libpython path).
fn installed() -> Vec<(u8, PathBuf)> {
    let root = std::process::Command::new("pyenv")
        .arg("root")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .unwrap_or_else(|| PathBuf::from("/root/.pyenv"));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root.join("versions")).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(minor) = name.strip_prefix("3.").and_then(|rest| rest.split('.').next()?.parse::<u8>().ok())
        else {
            continue;
        };
        // 3.6 and 3.7 name their library with their ABI flag (`libpython3.7m.so.1.0`).
        let flag = if minor < 8 { "m" } else { "" };
        if minor >= 6 {
            found.push((minor, entry.path().join(format!("lib/libpython3.{minor}{flag}.so.1.0"))));
        }
    }
    found.sort();
    found
}

/// Every offset a layout states: the struct and member path it stands for in `minor`, and its
/// value.
fn stated(minor: u8) -> Vec<(&'static str, String, u64)> {
    let layout = layout::layout(Version(minor))
        .unwrap_or_else(|| panic!("CPython 3.{minor} is installed but has no layout"));
    let k = &layout.kernel;
    let new = minor >= 11;
    let mut checks: Vec<(&'static str, String, u32)> = vec![
        ("_is", if new { "threads.head" } else { "tstate_head" }.into(), k.interpreter_threads),
        ("_ts", "next".into(), k.thread_next),
        ("_ts", "thread_id".into(), k.thread_id),
        (
            "_ts",
            match minor {
                6..=10 => "frame",
                11 | 12 => "cframe",
                _ => "current_frame",
            }
            .into(),
            k.thread_frame,
        ),
        ("PyCodeObject", "co_firstlineno".into(), k.code_first_line),
        ("PyCodeObject", "co_firstlineno".into(), layout.code.first_line),
        ("PyCodeObject", "co_filename".into(), layout.code.filename),
        ("PyCodeObject", "co_name".into(), layout.code.name),
        (
            "PyCodeObject",
            if layout.line_table == LineTable::Lnotab { "co_lnotab" } else { "co_linetable" }.into(),
            layout.code.line_table,
        ),
        ("PyObject", "ob_type".into(), OB_TYPE),
        ("PyVarObject", "ob_size".into(), BYTES_LENGTH),
        ("PyBytesObject", "ob_sval".into(), BYTES_DATA),
        ("PyASCIIObject", "length".into(), StringLayout::LENGTH),
        ("PyASCIIObject", "state".into(), StringLayout::STATE),
    ];
    // 3.6 starts from `interp_head`, whose first word is the interpreter (checked in the test).
    if minor >= 7 {
        checks.push(("_PyRuntimeState", "interpreters.main".into(), k.runtime_main_interpreter));
    }
    if let Some(qualname) = layout.code.qualname {
        checks.push(("PyCodeObject", "co_qualname".into(), qualname));
    }
    if let Instruction::Pointer { code_adaptive } = layout.instruction {
        checks.push(("PyCodeObject", "co_code_adaptive".into(), code_adaptive));
    }
    if minor == 11 || minor == 12 {
        checks.push(("_PyCFrame", "current_frame".into(), k.cframe_current_frame));
    }
    if new {
        let code = if minor >= 13 { "f_executable" } else { "f_code" };
        let instr = if minor >= 13 { "instr_ptr" } else { "prev_instr" };
        checks.push(("_PyInterpreterFrame", "previous".into(), k.frame_back));
        checks.push(("_PyInterpreterFrame", code.into(), k.frame_code));
        checks.push(("_PyInterpreterFrame", instr.into(), k.frame_instr));
        checks.push(("_PyInterpreterFrame", "owner".into(), k.frame_owner));
        if minor == 11 {
            checks.push(("_PyInterpreterFrame", "is_entry".into(), k.frame_is_entry));
        }
    } else {
        checks.push(("_frame", "f_back".into(), k.frame_back));
        checks.push(("_frame", "f_code".into(), k.frame_code));
        checks.push(("_frame", "f_lasti".into(), k.frame_instr));
    }
    checks.into_iter().map(|(name, path, value)| (name, path, u64::from(value))).collect()
}

#[test]
fn layouts_match_the_debug_information_of_every_installed_cpython() {
    // The CPythons installed are pyenv's, under root's home.
    if !crate::testing::e2e_enabled() {
        return;
    }
    let installed = installed();
    assert!(
        !installed.is_empty(),
        "no CPython 3.6+ found under pyenv's root: nothing to check the layouts against"
    );
    let mut mismatches = Vec::new();
    for (minor, library) in &installed {
        let image = std::fs::read(library).unwrap_or_else(|e| panic!("{}: {e}", library.display()));
        let structs = Structs::read(&image);
        let facts = ElfFacts::read(&image).expect("an ELF image");
        let name = library.file_name().unwrap().to_string_lossy();
        // Its own `_Py_DebugOffsets` (3.13+) agree with the table too.
        // 3.6's walk starts at `interp_head` (found in its code if not by name), 3.7+'s at
        // `_PyRuntime`.
        let root = if *minor == 6 { "interp_head" } else { "_PyRuntime" };
        let root = object::File::parse(&*image)
            .unwrap()
            .symbols()
            .find(|symbol| symbol.name() == Ok(root))
            .map(|symbol| symbol.address());
        match Image::read(&name, &image, &facts) {
            Image::Supported(interpreter) => {
                assert_eq!(interpreter.layout.version, Version(*minor));
                assert_eq!(Some(interpreter.runtime_svma), root, "3.{minor}: where the walk starts");
            }
            other => panic!("{}: {other:?}", library.display()),
        }
        let layout =
            layout::layout(Version(*minor)).unwrap_or_else(|| panic!("CPython 3.{minor} has no layout"));
        let mut expect = |what: String, found: Option<u64>, stated: u64| {
            if found != Some(stated) {
                mismatches.push(format!(
                    "3.{minor} {what}: the table says {stated}, the debug information {found:?}"
                ));
            }
        };
        for (name, path, value) in stated(*minor) {
            expect(format!("{name}.{path}"), structs.offset(name, &path), value);
        }
        expect(
            "sizeof(PyASCIIObject)".into(),
            structs.size("PyASCIIObject"),
            layout.string.ascii_data.into(),
        );
        expect(
            "sizeof(PyCompactUnicodeObject)".into(),
            structs.size("PyCompactUnicodeObject"),
            layout.string.compact_data.into(),
        );
        if *minor >= 13 {
            let debug = "_Py_DebugOffsets";
            expect(
                format!("{debug}.version"),
                structs.offset(debug, "version"),
                debug_offsets::VERSION as u64,
            );
            expect(
                format!("{debug}.free_threaded"),
                structs.offset(debug, "free_threaded"),
                debug_offsets::FREE_THREADED as u64,
            );
            for (path, position) in debug_offsets::positions(Version(*minor)).expect("a 3.13+ layout") {
                expect(format!("{debug}.{path}"), structs.offset(debug, path), position as u64);
            }
            // The cross-check finds `interpreters.head` just before `interpreters.main`.
            expect(
                "_PyRuntimeState.interpreters.head".into(),
                structs.offset("_PyRuntimeState", "interpreters.head"),
                (layout.kernel.runtime_main_interpreter - 8).into(),
            );
        }
        let frame = if *minor >= 11 { "_PyInterpreterFrame" } else { "_frame" };
        let k = &layout.kernel;
        let last_field_end = [k.frame_back + 8, k.frame_code + 8, k.frame_instr + 8]
            .into_iter()
            .chain(
                [k.frame_owner, k.frame_is_entry]
                    .into_iter()
                    .filter(|&o| o != PythonOffsets::NONE)
                    .map(|o| o + 1),
            )
            .max()
            .unwrap();
        assert!(
            k.frame_bytes >= last_field_end,
            "3.{minor}: frame_bytes {} < {last_field_end}",
            k.frame_bytes
        );
        assert!(structs.size(frame).is_some_and(|size| size >= u64::from(k.frame_bytes.min(last_field_end))));
    }
    assert!(mismatches.is_empty(), "layouts differ from the debug information:\n{}", mismatches.join("\n"));
}

/// Debian unstable's 3.14 (`cargo xtask setup` unpacks it): stripped, libpython linked in, most
/// of its eval loop moved out of `_PyEval_EvalFrameDefault` by a profile-guided build.
fn debian_python() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/debian-sid-python3.14/usr/bin/python3.14");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (run `cargo xtask setup`)", path.display()))
}

/// The unwind table the eval loop's moved part is found through is the target's: garbage in it
/// (all ones, or entries pointing anywhere) costs that part, never the image or a panic.
#[test]
fn a_garbage_unwind_table_costs_only_the_moved_part() {
    let clean = debian_python();
    let read = |image: &[u8]| match Image::read("python3.14", image, &ElfFacts::read(image).unwrap()) {
        Image::Supported(interpreter) => interpreter.eval_loop,
        other => panic!("{other:?}"),
    };
    let whole = read(&clean);
    let table = {
        let elf = object::File::parse(&*clean).unwrap();
        let (start, len) = elf.section_by_name(".eh_frame_hdr").unwrap().file_range().unwrap();
        // Past the header's four bytes, its two encoded pointers and its count.
        start as usize + 12..(start + len) as usize
    };
    for garbage in [|_: usize| 0xff, |at: usize| (at.wrapping_mul(0x9e37_79b9) >> 7) as u8] {
        let mut image = clean.clone();
        for at in table.clone() {
            image[at] = garbage(at);
        }
        let eval_loop = read(&image);
        let within = |range: &std::ops::Range<u64>| {
            whole.iter().any(|clean| clean.start <= range.start && range.end <= clean.end)
        };
        assert!(eval_loop.iter().all(within), "{eval_loop:x?} beside {whole:x?}");
        assert!(!eval_loop.is_empty(), "the function's own symbol is still read");
    }
}

#[test]
fn debian_3_14_is_read_by_its_own_offsets() {
    let mut image = debian_python();
    let facts = ElfFacts::read(&image).expect("an ELF image");
    let Image::Supported(interpreter) = Image::read("python3.14", &image, &facts) else { panic!("not read") };
    let table = layout::layout(Version(14)).unwrap();
    assert_eq!(interpreter.layout, *table, "the table agrees with the image's _Py_DebugOffsets");
    let split: u64 = interpreter.eval_loop.iter().map(|range| range.end - range.start).sum();
    assert!(
        interpreter.eval_loop.len() >= 2 && split > 50_000,
        "the eval loop's moved part found: {:x?}",
        interpreter.eval_loop
    );
    // Where `_Py_DebugOffsets` lies in the file: the start of `_PyRuntime`.
    let runtime = {
        let elf = object::File::parse(&*image).unwrap();
        let symbol = elf.dynamic_symbols().find(|symbol| symbol.name() == Ok("_PyRuntime")).unwrap();
        let section = elf.section_by_index(symbol.section_index().unwrap()).unwrap();
        (symbol.address() - section.address() + section.file_range().unwrap().0) as usize
    };
    let (_, owner) = debug_offsets::positions(Version(14))
        .unwrap()
        .find(|&(path, _)| path == "interpreter_frame.owner")
        .unwrap();
    let mut with_owner_at = |offset: u64| {
        image[runtime + owner..runtime + owner + 8].copy_from_slice(&offset.to_le_bytes());
        let facts = ElfFacts::read(&image).unwrap();
        Image::read("python3.14", &image, &facts)
    };
    // A patch release that moved the frame's owner by 8 bytes: followed.
    match with_owner_at(82) {
        Image::Supported(moved) => {
            assert_eq!((moved.layout.kernel.frame_owner, moved.layout.kernel.frame_bytes), (82, 83))
        }
        other => panic!("{other:?}"),
    }
    // One that moved it beyond the frame's bytes the kernel reads: refused by name.
    match with_owner_at(4096) {
        Image::Unsupported(what) => assert!(
            what.starts_with("CPython 3.14.") && what.ends_with(": interpreter_frame.owner moved"),
            "{what}"
        ),
        other => panic!("{other:?}"),
    }
}
