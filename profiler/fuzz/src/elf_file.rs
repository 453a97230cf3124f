//! Files a target maps, as the profiler reads them: any bytes give facts, CFI, PLT stubs and
//! what each runtime's recogniser makes of them, or nothing, never a panic or a runaway
//! (compressed sections and stub counts are bounded).

use std::io::Write as _;

use profiler::stages::{
    ElfFacts, ModuleCfi, PltStubs,
    runtime_images::{HotSpotImage, PythonImage, V8Image},
};

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    if let Some(facts) = ElfFacts::read(data) {
        let _ = (facts.svma(0x1000), facts.dwarf_readable_alone());
        // CPython is told apart by its file's name too: 3.6 has no `_PyRuntime`.
        for name in ["libpython3.12.so.1.0", "python3.6"] {
            let _ = PythonImage::read(name, data, &facts);
        }
    }
    let _ = (HotSpotImage::read(data), V8Image::read(data));
    let stubs = PltStubs::parse(data);
    for offset in [0, 0x1000, 0x1030, u64::MAX] {
        let _ = stubs.name(offset);
    }
    // The CFI reader takes a file, as the registry hands it over.
    let mut file = tempfile::tempfile().expect("a temporary file");
    file.write_all(data).expect("written");
    if let Ok(mut cfi) = ModuleCfi::load(&file, Some(&file)) {
        let _ = (cfi.has_cfi(), cfi.svma(0x1000), cfi.svma_range(), cfi.take_sections());
    }
}
