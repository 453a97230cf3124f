//! Names of code, as the model keeps them: a name and what kind of code it names.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    /// A user function.
    Function,
    /// A user function inlined into the one before it.
    Inlined,
    /// A kernel function.
    Kernel,
    /// JIT-compiled code, named by the process's perf map.
    Jit,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub kind: SymbolKind,
    /// Where in its function's source the frame is, when the debug information says.
    pub source: Option<SourceLine>,
}

/// A line of a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLine {
    pub file: String,
    pub line: u32,
}

impl Symbol {
    pub fn new(name: impl Into<String>, kind: SymbolKind) -> Self {
        Self { name: name.into(), kind, source: None }
    }

    pub fn at(self, source: Option<SourceLine>) -> Self {
        Self { source, ..self }
    }

    /// The name as flame graphs and summaries show it: without the folded format's separators,
    /// and with the suffix of its kind (`_[k]` kernel, `_[i]` inlined, `_[j]` JIT), the
    /// convention of perf and FlameGraph that inferno's palettes colour by.
    pub fn display_name(&self) -> String {
        let suffix = match self.kind {
            SymbolKind::Function => "",
            SymbolKind::Inlined => "_[i]",
            SymbolKind::Kernel => "_[k]",
            SymbolKind::Jit => "_[j]",
        };
        format!("{}{suffix}", without_separators(&self.name))
    }
}

/// Text a target controls (a command name, a symbol, a path), made safe for a terminal: control
/// characters (escape sequences among them) are shown as `\u{..}` escapes instead of acted upon.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return text.into();
    }
    text.chars()
        .map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

/// A name with the separators of the folded format (`;` between frames, one stack per line)
/// replaced, so that it stays one frame.
pub fn without_separators(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_text_has_no_control_characters() {
        assert_eq!(printable("plain name"), "plain name");
        assert_eq!(printable("a\x1b[2Jb\x07"), "a\\u{1b}[2Jb\\u{7}");
        assert_eq!(printable("line\nbreak\u{9b}"), "line\\u{a}break\\u{9b}");
    }

    #[test]
    fn display_names_carry_their_kind() {
        let name = |kind| Symbol::new("a;b\nc", kind).display_name();
        assert_eq!(name(SymbolKind::Function), "a:b c");
        assert_eq!(name(SymbolKind::Inlined), "a:b c_[i]");
        assert_eq!(name(SymbolKind::Kernel), "a:b c_[k]");
        assert_eq!(name(SymbolKind::Jit), "a:b c_[j]");
    }
}
