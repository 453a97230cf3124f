//! What one file mapped executable is to the runtimes: opened as the registry opens files,
//! checked for the symbols that mark a runtime's images (what it exports for dynamic linking,
//! whatever the file is called: an extension module only imports CPython's), and, when one
//! marks it, recognised by that runtime. Runs on the discovery worker, or at once for a file a
//! command will map and for `profiler check`.
use std::{any::Any, cell::Cell, io, panic::AssertUnwindSafe, path::Path, sync::Arc};

use object::{Object as _, ObjectSection as _, ObjectSymbol as _, read::elf::ElfFile64};

use crate::{
    address_space::{Backing, Identity, Mapping, open_mapped},
    model::Tgid,
    untrusted::{ElfFacts, StableFile, open},
};

/// Dynamic symbols of a file looked at for marks at most (`node` exports 75,000).
const MAX_SYMBOLS: usize = 1 << 20;

/// A runtime's image as a runtime reads it: its file's name, bytes and what it says of itself.
pub(crate) struct ImageFile<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
    pub facts: &'a ElfFacts,
    file: &'a StableFile,
    /// Mapped again for the image to keep (a copy's pages, held while it lives).
    kept: Cell<bool>,
}

impl ImageFile<'_> {
    /// The file mapped again, for an image that keeps its bytes (counted as held by it).
    pub(crate) fn map(&self) -> io::Result<memmap2::Mmap> {
        self.kept.set(true);
        open::map(self.file)
    }
}

/// What a file is checked for to find which runtimes' images it may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark<'a> {
    /// A symbol it defines for dynamic linking.
    Symbol(&'a [u8]),
    /// A section it has, by name.
    Section(&'a [u8]),
}

/// A runtime's recognition, as discovery runs it (on its worker): what marks its images, and what
/// it makes of one.
pub(crate) trait Recogniser: Send + Sync {
    /// Whether a file with `mark` may be one of its images.
    fn marks(&self, mark: Mark<'_>) -> bool;
    /// Its image in `file` (`None`: not one after all), or what it is when it is one it does
    /// not read.
    fn recognise(&self, file: &ImageFile<'_>) -> anyhow::Result<Option<Arc<dyn Any + Send + Sync>>>;
}

/// What a runtime made of an image of its own: the image, or why it does not read it.
pub(crate) type Recognised = Result<Arc<dyn Any + Send + Sync>, String>;

/// What a file is to the runtimes: the images it is, by runtime (the index of its recogniser),
/// none for most files.
#[derive(Clone, Default)]
pub(super) struct Examined {
    pub images: Vec<(usize, Recognised)>,
    /// It took too long to examine: taken as no runtime's image.
    pub given_up: bool,
    /// Bytes of its file its images keep mapped.
    pub held: u64,
}

impl Examined {
    /// What it holds in the cache of what targets describe, about.
    pub(super) fn bytes(&self) -> u64 {
        64 + 64 * self.images.len() as u64 + self.held
    }
}

/// What `mapping` of process `tgid` (`identity`) is to `recognisers`; `None` when it could not
/// be read through that process (gone, out of descriptors, a copy still under way, no room for
/// a copy): that says nothing of the file. A panic in a parser on a hostile file costs that
/// file, taken as no runtime's image.
pub(super) fn examine(
    recognisers: &[Box<dyn Recogniser>],
    tgid: Tgid,
    identity: &Identity,
    mapping: &Mapping,
) -> Option<Examined> {
    let Backing::File { path, .. } = &mapping.backing else { return Some(Examined::default()) };
    let file = match open_mapped(tgid, identity, mapping, path) {
        Ok(file) => file,
        // JIT code in a file, or a user's file too large to copy: not an image read. One of a
        // file system never asked is not remembered: its device number may be another's later.
        Err(err) if open::is_jit_memory_error(&err) || err.kind() == io::ErrorKind::FileTooLarge => {
            return Some(Examined::default());
        }
        Err(_) => return None,
    };
    let examined = std::panic::catch_unwind(AssertUnwindSafe(|| examine_file(recognisers, path, &file)));
    Some(examined.unwrap_or_default())
}

/// What the open `file` (mapped as `path`) is to `recognisers`.
fn examine_file(recognisers: &[Box<dyn Recogniser>], path: &Path, file: &StableFile) -> Examined {
    let Ok(bytes) = open::map(file) else { return Examined::default() };
    let marked = marked_by(recognisers, &bytes);
    if marked.is_empty() {
        return Examined::default();
    }
    let Some(facts) = ElfFacts::read(&bytes) else { return Examined::default() };
    let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
    let mut held = 0;
    let images = marked
        .into_iter()
        .filter_map(|index| {
            let image = ImageFile { name, bytes: &bytes, facts: &facts, file, kept: Cell::new(false) };
            match recognisers[index].recognise(&image) {
                Ok(Some(recognised)) => {
                    held += if image.kept.get() { bytes.len() as u64 } else { 0 };
                    Some((index, Ok(recognised)))
                }
                Ok(None) => None,
                Err(what) => Some((index, Err(format!("{what:#}")))),
            }
        })
        .collect();
    Examined { images, given_up: false, held }
}

/// The recognisers (by index) whose marks `image` has among its sections and its first
/// [`MAX_SYMBOLS`] dynamic symbols.
fn marked_by(recognisers: &[Box<dyn Recogniser>], image: &[u8]) -> Vec<usize> {
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(image) else { return Vec::new() };
    let mut marked = Vec::new();
    let sections = elf.sections().filter_map(|section| section.name_bytes().ok()).map(Mark::Section);
    let defined = elf
        .dynamic_symbols()
        .take(MAX_SYMBOLS)
        .filter(|symbol| !symbol.is_undefined() && symbol.section_index().is_some())
        .filter_map(|symbol| symbol.name_bytes().ok())
        .map(Mark::Symbol);
    for mark in sections.chain(defined) {
        for (index, recogniser) in recognisers.iter().enumerate() {
            if !marked.contains(&index) && recogniser.marks(mark) {
                marked.push(index);
            }
        }
        if marked.len() == recognisers.len() {
            break;
        }
    }
    marked.sort_unstable();
    marked
}
