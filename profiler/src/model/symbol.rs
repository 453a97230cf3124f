//! Names of code, as the model keeps them: a name and what kind of code it names.
use std::borrow::Cow;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SymbolKind {
    /// A user function.
    Function,
    /// A user function inlined into the one before it.
    Inlined,
    /// A kernel function.
    Kernel,
    /// JIT-compiled code, named by the process's perf map.
    Jit,
    /// A function of an interpreted language (Python's, read from the interpreter's memory),
    /// shown with its source file and line.
    Script,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    pub name: String,
    pub kind: SymbolKind,
    /// Where in its function's source the frame is, when the debug information says.
    pub source: Option<SourceLine>,
    /// The language of a runtime's function (`Python`, `Go`), as the runtime that named it says;
    /// none for code named from its file's symbols, the kernel's, or a JIT's perf map.
    pub language: Option<Cow<'static, str>>,
}

/// A line of a source file, and a column of it where one is known.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceLine {
    pub file: String,
    /// 1-based; 0 when not known.
    pub line: u32,
    /// 1-based; 0 when not known (only JavaScript's functions say where on their line they
    /// start, as V8's perf map does).
    pub column: u32,
}

impl Symbol {
    /// A symbol named `name`, made [`printable`]: names come from targets (symbol tables, perf
    /// maps, recordings) and every output must stay valid whatever their bytes.
    pub fn new(name: impl Into<String>, kind: SymbolKind) -> Self {
        Self { name: printable_owned(name.into()), kind, source: None, language: None }
    }

    /// The symbol of a function of `language`, made [`printable`].
    pub fn in_language(self, language: impl Into<Cow<'static, str>>) -> Self {
        let language = match language.into() {
            Cow::Owned(language) => Cow::Owned(printable_owned(language)),
            borrowed => borrowed,
        };
        Self { language: Some(language), ..self }
    }

    /// The symbol at `source`, its file name made [`printable`].
    pub fn at(self, source: Option<SourceLine>) -> Self {
        let source = source.map(|source| SourceLine { file: printable_owned(source.file), ..source });
        Self { source, ..self }
    }

    /// The name as flame graphs and summaries show it: a [`folded_frame`],
    /// and with the suffix of its kind (`_[k]` kernel, `_[i]` inlined, `_[j]` JIT), the
    /// convention of perf and FlameGraph that inferno's palettes colour by.
    pub fn display_name(&self) -> String {
        if self.kind == SymbolKind::Script {
            return self.script_display_name();
        }
        let suffix = match self.kind {
            SymbolKind::Function | SymbolKind::Script => "",
            SymbolKind::Inlined => "_[i]",
            SymbolKind::Kernel => "_[k]",
            SymbolKind::Jit => "_[j]",
        };
        format!("{}{suffix}", folded_frame(&self.name))
    }
}

impl Symbol {
    /// A script's function as py-spy writes Python's: `qualname (path/file.py:LINE)`, or
    /// `qualname (path/file.py)` when its line is not known (0); with the column where one is
    /// known, as V8's perf map writes JavaScript's: `alpha (path/app.js:LINE:COLUMN)`.
    fn script_display_name(&self) -> String {
        let name = match &self.source {
            Some(SourceLine { file, line: 0, .. }) => format!("{} ({file})", self.name),
            Some(SourceLine { file, line, column: 0 }) => format!("{} ({file}:{line})", self.name),
            Some(SourceLine { file, line, column }) => format!("{} ({file}:{line}:{column})", self.name),
            None => self.name.clone(),
        };
        folded_frame(&name).into_owned()
    }
}

/// Text a target controls (a command name, a symbol, a path), made safe to show anywhere: the
/// characters that would act instead of being read are shown as `\u{..}` escapes. Those are
/// control characters (terminal escape sequences, line breaks that would split a line-based
/// format), the characters XML 1.0 forbids beyond them (U+FFFE, U+FFFF: an SVG holding one does
/// not open), line and paragraph separators, and the bidirectional formatting characters that
/// make text read in another order than it is stored.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return text.into();
    }
    text.chars().map(|c| if acts(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// [`printable`] for owned text, reusing it when nothing needs escaping.
pub(crate) fn printable_owned(text: String) -> String {
    match printable(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

fn acts(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{fffe}'
                | '\u{ffff}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// A name (made [`printable`] already) as one frame of a folded stack, whose readers split
/// frames at `;`, take a line's last one or two space-separated numbers as its counts (two make
/// a differential profile), and skip empty frames: `;` becomes `:`, a space before a trailing
/// number `_`, and an empty name `[no name]`.
pub(crate) fn folded_frame(name: &str) -> Cow<'_, str> {
    if name.is_empty() {
        return "[no name]".into();
    }
    let trailing_number = name
        .rsplit_once(' ')
        .is_some_and(|(_, last)| !last.is_empty() && last.chars().all(|c| c.is_ascii_digit() || c == '.'));
    if !name.contains(';') && !trailing_number {
        return name.into();
    }
    let mut frame = name.replace(';', ":");
    if trailing_number && let Some(space) = frame.rfind(' ') {
        frame.replace_range(space..=space, "_");
    }
    frame.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_has_no_control_characters() {
        assert_eq!(printable("plain name"), "plain name");
        assert_eq!(printable("a\x1b[2Jb\x07"), "a\\u{1b}[2Jb\\u{7}");
        assert_eq!(printable("line\nbreak\u{9b}"), "line\\u{a}break\\u{9b}");
        assert_eq!(printable("not\u{ffff}xml\u{fffe}"), "not\\u{ffff}xml\\u{fffe}");
        assert_eq!(printable("abc\u{202e}fed\u{2029}"), "abc\\u{202e}fed\\u{2029}");
        assert_eq!(printable("na\u{ef}ve \u{4e2d}"), "na\u{ef}ve \u{4e2d}");
    }

    #[test]
    fn symbols_and_their_files_are_printable() {
        let symbol = Symbol::new("a\x1bb", SymbolKind::Function).at(Some(SourceLine {
            file: "/src/\x07.c".into(),
            line: 3,
            column: 0,
        }));
        assert_eq!(symbol.name, "a\\u{1b}b");
        assert_eq!(symbol.source.unwrap().file, "/src/\\u{7}.c");
    }

    #[test]
    fn display_names_carry_their_kind() {
        let name = |kind| Symbol::new("a;b\nc", kind).display_name();
        assert_eq!(name(SymbolKind::Function), "a:b\\u{a}c");
        assert_eq!(name(SymbolKind::Inlined), "a:b\\u{a}c_[i]");
        assert_eq!(name(SymbolKind::Kernel), "a:b\\u{a}c_[k]");
        assert_eq!(name(SymbolKind::Jit), "a:b\\u{a}c_[j]");
        let python = Symbol::new("K.f", SymbolKind::Script).at(Some(SourceLine {
            file: "/a;b.py".into(),
            line: 7,
            column: 0,
        }));
        assert_eq!(python.display_name(), "K.f (/a:b.py:7)");
        let unknown_line = Symbol::new("f", SymbolKind::Script).at(Some(SourceLine {
            file: "/a.py".into(),
            line: 0,
            column: 0,
        }));
        assert_eq!(unknown_line.display_name(), "f (/a.py)");
        let javascript = Symbol::new("alpha", SymbolKind::Script).at(Some(SourceLine {
            file: "/app.js".into(),
            line: 13,
            column: 15,
        }));
        assert_eq!(javascript.display_name(), "alpha (/app.js:13:15)");
    }

    #[test]
    fn folded_frames_stay_one_frame_without_counts() {
        assert_eq!(folded_frame("std::vector<int>::push_back"), "std::vector<int>::push_back");
        assert_eq!(folded_frame("a;b"), "a:b");
        assert_eq!(folded_frame("operator new 42"), "operator new_42");
        assert_eq!(folded_frame("differential 1 2.5"), "differential 1_2.5");
        assert_eq!(folded_frame("trailing "), "trailing ");
        assert_eq!(folded_frame(""), "[no name]");
    }
}
