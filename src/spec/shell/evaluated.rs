//! Where bash reads the text of an expansion again, as code or as a
//! variable name, though it came from a quoted `"${X}"`.
//!
//! A POSIX shell never parses an expansion's result again, but bash does
//! in a few places: arithmetic (`[[ x -eq y ]]` and the other number
//! tests of `[[ ]]`, `let`, `declare -i`, array subscripts, `${x:off}`),
//! variable names (`read`, `printf -v`, `test -v`, `unset`, `declare -n`),
//! prompts (`PS4`) and the builtins that run text (`eval`, `trap`,
//! `source`, `alias`, `compgen -C`). A value there whose text is
//! `a[$(cmd)]` runs `cmd`: bash expands a subscript before it evaluates
//! it. So a hole is refused wherever bash would read it so; the
//! differential test (tests/it/props.rs) runs every accepted context
//! under bash with such values.
//!
//! [`Command`] follows the simple command being read at one level of the
//! scanner (the template, or a `$(...)`): its words so far, with quotes
//! removed, enough to know its name, its options and whether a `[[ ]]`
//! or an array assignment is open.

/// Builtins that read an argument as code, arithmetic or a variable name,
/// whatever it is.
const READS_AS_CODE: [&str; 18] = [
    // `jobs -x` runs its arguments as a command (`jobs -x eval ...`),
    // `wait -p` names a variable.
    "jobs",
    "wait",
    "let",
    "eval",
    "trap",
    "source",
    ".",
    "alias",
    "read",
    "mapfile",
    "readarray",
    "unset",
    "getopts",
    "enable",
    "complete",
    "compgen",
    "bind",
    "fc",
];

/// Builtins that assign: a value is fine after `NAME=`, with no option
/// (`-i` makes the assignment arithmetic, `-n` a name, `-a` a list).
const DECLARES: [&str; 5] = ["declare", "typeset", "local", "export", "readonly"];

/// Variables whose text bash expands again when it shows them.
/// (A prompt when it is shown; `BASH_ENV` and `ENV` when a shell starts:
/// bash expands `$(...)` in them before it reads the file they name.)
const PROMPTS: [&str; 8] = [
    "PS0",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "PROMPT_COMMAND",
    "BASH_ENV",
    "ENV",
];

/// Words before a command's name that do not name it.
const PREFIXES: &[&str] = &[
    "!", "{", "time", "-p", "if", "then", "else", "elif", "do", "while", "until", "command",
    "builtin", "coproc",
];

/// A character of a word that is not the word's own text: an unquoted
/// expansion, which may vanish or split into several words.
const MARK: char = '\u{0}';

/// A quoted expansion (or a value's reference): one field, whatever it is.
const QUOTED_MARK: char = '\u{1}';

/// Why a value may not stand in a command whose name is made with an
/// expansion.
const UNKNOWN_NAME: &str = "a value in a command whose name is made with an expansion (`$X`, `$(...)`, a value, or text joined to one): tunectl cannot tell which command reads the value, and if the name is `eval` or another builtin that reads its arguments as code (an empty or split expansion leaves it to the words around it), the value runs; name the program in the template, or give its path with a `/` outside the expansion, quoted (`\"$VENV\"/bin/python`, `./{{ bin }}`)";

/// The simple command being read at one level.
#[derive(Debug, Default, Clone)]
pub(super) struct Command {
    words: Vec<String>,
    cur: String,
    in_word: bool,
    /// In `cur`: `[` less `]`, and whether a `=` was read (kept as `cur`
    /// grows, so that a long word costs no rescan a character).
    brackets: i64,
    assigns: bool,
    /// Inside `[[ ... ]]`.
    cond: bool,
    /// Parentheses open in an array assignment `NAME=(...)`.
    compound: u32,
    /// Names this command evaluates or gives an attribute to (`declare
    /// -i x`, `let x+1`, `[[ x -eq 1 ]]`), for the scanner to collect.
    pub(super) evaluated: Vec<String>,
    /// Names this command defines as a function or an alias (`f() {`,
    /// `function f`, `alias f=...`; [`ANY_NAME`] for one made with an
    /// expansion), for the scanner to collect.
    pub(super) defined: Vec<String>,
    /// (variable, variable named in the text assigned to it), for the
    /// scanner to collect.
    pub(super) flows: Vec<(String, String)>,
}

/// A function or alias whose name is made with an expansion: it may be
/// any command's.
pub(super) const ANY_NAME: &str = "\u{0}";

/// Whether a command's name (quotes removed) is one tunectl can read:
/// plain text, or one field with a `/` of its own outside the expansions
/// (a path, which the shell runs without looking for a builtin, a
/// function or an alias).
pub(super) fn readable(name: &str) -> bool {
    !name.contains([MARK, QUOTED_MARK]) || is_path(name)
}

/// The variable a `$` at `i` expands, when it is one by name (`$x`,
/// `${x}`, `${x:-d}`...; not `${!x}`, a special parameter or `$(`).
pub(super) fn parameter_at(items: &[super::Item], i: usize) -> Option<String> {
    if char_at(items, i) != Some('$') {
        return None;
    }
    let start = if char_at(items, i + 1) == Some('{') {
        i + 2
    } else {
        i + 1
    };
    let name = name_from(items, start);
    super::is_variable_name(&name).then_some(name)
}

/// The character at `j`, if it is one (not a value).
fn char_at(items: &[super::Item], j: usize) -> Option<char> {
    match items.get(j) {
        Some(super::Item::Char(c)) => Some(*c),
        _ => None,
    }
}

/// The run of letters, digits and `_` from `start`.
fn name_from(items: &[super::Item], start: usize) -> String {
    (start..)
        .map_while(|j| char_at(items, j).filter(|c| c.is_ascii_alphanumeric() || *c == '_'))
        .collect()
}

/// The variable of a `${NAME@...}` at `i` (bash's `@P` expands the text
/// as a prompt; the other transformations are counted with it).
pub(super) fn prompt_expanded_at(items: &[super::Item], i: usize) -> Option<String> {
    if char_at(items, i) != Some('$') || char_at(items, i + 1) != Some('{') {
        return None;
    }
    let name = name_from(items, i + 2);
    (super::is_variable_name(&name) && char_at(items, i + 2 + name.len()) == Some('@'))
        .then_some(name)
}

/// A name a function or an alias is defined under, as the scanner keeps
/// it: [`ANY_NAME`] when it is made with an expansion.
fn defined_as(name: &str) -> String {
    if name.contains([MARK, QUOTED_MARK]) {
        ANY_NAME.to_string()
    } else {
        name.to_string()
    }
}

/// Whether `word`, an argument of a command whose name tunectl cannot
/// read, may make that command define an alias or a function: a builtin
/// that defines one or runs text, an alias's `NAME=...`, or an expansion
/// (which may be either).
fn may_define(word: &str) -> bool {
    matches!(
        word,
        "alias" | "eval" | "." | "source" | "command" | "builtin"
    ) || word.contains([MARK, QUOTED_MARK])
        || word
            .split_once('=')
            .is_some_and(|(name, _)| !name.is_empty() && !name.starts_with('-'))
}

/// Whether a command's name is a path: one field with a `/` of its own.
pub(super) fn is_path(name: &str) -> bool {
    !name.contains(MARK) && name.contains('/')
}

/// The variable names in a word (runs of letters, digits and `_` that do
/// not start with a digit).
fn identifiers(word: &str) -> impl Iterator<Item = &str> {
    word.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// `NAME=`, `NAME+=`, `NAME[...]=` or `NAME[...]+=` at the start of
/// `word`: the name. (bash takes a subscripted assignment before a command
/// as an assignment, and runs the command.)
fn assigned_name(word: &str) -> Option<&str> {
    let end = word
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(word.len());
    let name = &word[..end];
    if !super::is_variable_name(name) {
        return None;
    }
    let mut rest = &word[end..];
    if rest.starts_with('[') {
        let mut depth = 0usize;
        let close = rest.char_indices().find_map(|(i, c)| {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
            None
        })?;
        rest = &rest[close + 1..];
    }
    let rest = rest.strip_prefix('+').unwrap_or(rest);
    rest.starts_with('=').then_some(name)
}

impl Command {
    /// A character of the current word, quotes removed.
    pub(super) fn push(&mut self, c: char) {
        self.cur.push(c);
        self.in_word = true;
        match c {
            '[' => self.brackets += 1,
            ']' => self.brackets -= 1,
            // A `=` inside the subscript (`a[x=1 ...]`) leaves it open.
            '=' if self.brackets <= 0 => self.assigns = true,
            _ => {}
        }
    }

    /// An unquoted expansion in the current word: the word names no
    /// builtin or keyword, and may vanish or split.
    pub(super) fn mark(&mut self) {
        self.push(MARK);
    }

    /// A quoted expansion, or a value, in the current word.
    pub(super) fn quoted_mark(&mut self) {
        self.push(QUOTED_MARK);
    }

    /// The current word is `NAME[` with its subscript open, where bash may
    /// read an assignment (before the command's name, or as an argument of
    /// `declare` and its kin): bash reads the subscript to its `]` as one
    /// word, blanks, newlines, operators and redirections included
    /// (`a[x y]=1`, `a[\n...]=1`).
    fn in_subscript(&self) -> bool {
        self.in_word
            && self.compound == 0
            && !self.cond
            && self
                .cur
                .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && !self.assigns
            && self.brackets > 0
            && self.name().is_none_or(|n| DECLARES.contains(&n))
    }

    /// A blank: it ends the current word, but inside an array subscript
    /// of an assignment.
    pub(super) fn blank(&mut self, c: char) {
        if self.in_subscript() {
            self.push(c);
        } else {
            self.end_word();
        }
    }

    /// A redirection (`<`, `>`) ends the current word, but inside an
    /// array subscript of an assignment.
    pub(super) fn redirection(&mut self, c: char) {
        if self.in_subscript() {
            self.push(c);
        } else {
            self.end_word();
        }
    }

    /// A blank or a redirection ends the current word.
    pub(super) fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.cur);
        self.brackets = 0;
        self.assigns = false;
        self.in_word = false;
        if self.compound == 0 {
            if !self.cond && word == "[[" && self.name().is_none() {
                self.cond = true;
            } else if self.cond && word == "]]" {
                self.cond = false;
            } else if self.cond {
                self.evaluated
                    .extend(identifiers(&word).map(str::to_string));
            }
        }
        // The text of an assignment (`y='eval "$x"'`): a variable named in
        // it is read where `y` is (its expansions, `y=$x`, the scanner
        // follows itself). A prompt's text is expanded again when shown.
        if self.name().is_none_or(|n| DECLARES.contains(&n))
            && let Some(target) = assigned_name(&word)
        {
            let text = word.split_once('=').map_or("", |(_, t)| t);
            if PROMPTS.contains(&target) {
                self.evaluated.extend(identifiers(text).map(str::to_string));
            } else {
                self.flows
                    .extend(identifiers(text).map(|v| (target.to_string(), v.to_string())));
            }
        }
        match self.name() {
            // Text that bash runs as code (`eval 'eval "$x"'`, `trap '...'
            // EXIT`, an alias's body): a variable named in it may be read
            // again there.
            Some("let" | "eval" | "trap" | "alias" | "bind" | "complete" | "compgen" | "fc") => {
                self.evaluated
                    .extend(identifiers(&word).map(str::to_string))
            }
            Some(n) if DECLARES.contains(&n) && !word.starts_with(['-', '+']) => {
                let with_option = self
                    .words
                    .iter()
                    .skip_while(|w| w.as_str() != n)
                    .any(|w| w.starts_with(['-', '+']));
                let name = word.split(['=', '[', '+']).next().unwrap_or("");
                if with_option && super::is_variable_name(name) {
                    self.evaluated.push(name.to_string());
                }
            }
            _ => {}
        }
        // A word given to a command that may define a function or an
        // alias where tunectl cannot see its name: text that `eval`, `.`
        // or `source` runs, or, in a command whose name it cannot read
        // (which may be `alias` or `eval`: `$X alias r=eval`, X empty),
        // such a builtin's name, a `NAME=` or an expansion.
        if let Some(n) = self.name()
            && (matches!(n, "eval" | "." | "source") || (!readable(n) && may_define(&word)))
        {
            self.defined.push(ANY_NAME.to_string());
        }
        match self.name() {
            Some("alias") if word != "alias" && !word.starts_with('-') => {
                let name = word.split('=').next().unwrap_or("");
                self.defined.push(defined_as(name));
            }
            Some("function") if self.words.last().is_some_and(|w| w == "function") => {
                self.defined.push(defined_as(word.trim_end_matches("()")));
            }
            _ => {}
        }
        // `{` and `}` open and close a group (`f() { ...; }`, `function f {`):
        // a command starts after them. They are reserved words only where a
        // command's name may stand: elsewhere (`eval }`) an argument.
        let at_name = match self.name() {
            None => true,
            Some(n) => n == "function" && word == "{",
        };
        if !self.cond && self.compound == 0 && (word == "{" || word == "}") && at_name {
            self.next_command();
            return;
        }
        self.words.push(word);
    }

    /// An operator character (`;`, `&`, `|`, `(`, `)` or a newline).
    pub(super) fn operator(&mut self, c: char) {
        if self.in_subscript() {
            self.push(c);
            return;
        }
        if c == '('
            && self.compound == 0
            && self.in_word
            && self.cur.ends_with('=')
            && assigned_name(&self.cur).is_some()
        {
            self.compound = 1;
            return;
        }
        // `NAME (` where a command's name stands: a function's definition.
        if c == '(' && self.compound == 0 {
            let name = match (self.in_word, self.words.as_slice()) {
                (true, []) => Some(self.cur.clone()),
                (false, [w]) if w != "function" => Some(w.clone()),
                _ => None,
            };
            if let Some(n) = name.filter(|n| !n.is_empty()) {
                self.defined.push(defined_as(&n));
            }
        }
        if self.compound > 0 {
            match c {
                '(' => self.compound += 1,
                ')' => {
                    self.compound -= 1;
                    if self.compound == 0 {
                        self.mark();
                        self.end_word();
                    }
                }
                _ => {}
            }
            return;
        }
        self.end_word();
        if !self.cond {
            self.next_command();
        }
    }

    /// A new command starts: what was collected for the scanner stays.
    fn next_command(&mut self) {
        *self = Command {
            evaluated: std::mem::take(&mut self.evaluated),
            defined: std::mem::take(&mut self.defined),
            flows: std::mem::take(&mut self.flows),
            ..Command::default()
        };
    }

    /// The variable a value at this point is assigned to: `NAME=` before
    /// a command or as an argument of `declare` and its kin, or the
    /// variable of a `for NAME in` list.
    pub(super) fn assigned(&self) -> Option<String> {
        match self.name() {
            None => assigned_name(&self.cur).map(str::to_string),
            Some(n) if DECLARES.contains(&n) => assigned_name(&self.cur).map(str::to_string),
            Some("printf") => {
                let args =
                    &self.words[self.words.iter().position(|w| w == "printf").unwrap_or(0) + 1..];
                match args {
                    [v, var, ..] if v == "-v" => Some(var.clone()),
                    _ => None,
                }
            }
            Some(kw @ ("for" | "select")) => {
                let args = &self.words[self.words.iter().position(|w| w == kw).unwrap_or(0) + 1..];
                match args {
                    [var, rest @ ..] if rest.first().is_some_and(|w| w == "in") => {
                        Some(var.clone())
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The command's name: its first word that is no prefix keyword and no
    /// assignment; `None` while none has been read.
    pub(super) fn name(&self) -> Option<&str> {
        self.words
            .iter()
            .map(String::as_str)
            .find(|w| !PREFIXES.contains(w) && assigned_name(w).is_none())
    }

    /// Why a value inside a `$(...)` of the current word may not stand
    /// there: [`Command::refusal`], or the `$(` is unquoted where the shell
    /// takes a command's name (or `exec`'s), so that what it prints is
    /// split into a command and its arguments.
    pub(super) fn refusal_through_output(&self) -> Option<String> {
        if self.at_name() && self.cur.contains(MARK) {
            return Some("a value inside an unquoted `$(...)` that stands as a command's name: the shell splits what it prints into a command and its arguments, so the value would choose what runs; quote the substitution (\"$(...)\") or name the program in the template".to_string());
        }
        self.refusal()
    }

    /// Whether the current word stands where the shell takes a command's
    /// name (or `exec`'s): an unquoted expansion there is split into a
    /// command and its arguments.
    pub(super) fn at_name(&self) -> bool {
        match self.name() {
            None => assigned_name(&self.cur).is_none(),
            Some("exec") => self
                .words
                .iter()
                .skip_while(|w| w.as_str() != "exec")
                .skip(1)
                .all(|w| w.starts_with('-')),
            Some(_) => false,
        }
    }

    /// Why a value may not stand here (at the current point of the
    /// current word), if bash would read it as code or as a name.
    pub(super) fn refusal(&self) -> Option<String> {
        if self.cond {
            return Some(
                "a value inside [[ ... ]]: bash evaluates the operands of its number tests (-eq, -lt...) and the name after -v as code (`a[$(...)]` in a value runs); compare with [ ... ] or `case`, or in the program".to_string(),
            );
        }
        if self.compound > 0 {
            return Some(
                "a value inside an array assignment NAME=(...): bash evaluates its [...]= subscripts as arithmetic, running `$(...)` in a value; assign the value to a plain variable".to_string(),
            );
        }
        let Some(name) = self.name() else {
            // An assignment before the command (or the command's own name,
            // which is fine: a program named by a value).
            if self
                .cur
                .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && !self.assigns
                && self.cur.contains('[')
            {
                return Some(
                    "a value in an array subscript (NAME[...]=): bash evaluates a subscript as arithmetic, running `$(...)` in a value".to_string(),
                );
            }
            if let Some(n) = assigned_name(&self.cur) {
                return PROMPTS.contains(&n).then(|| format!("a value assigned to {n}: bash expands its text again (a prompt when it shows it, BASH_ENV or ENV when a shell starts), so `$(...)` in a value runs"));
            }
            // The value joins the command's name: after an unquoted
            // expansion (`$X{{ v }}`, `$(echo eval)x={{ v }}`) that may
            // split, the value may be an argument of whatever it prints.
            return self.cur.contains(MARK).then(|| UNKNOWN_NAME.to_string());
        };
        let at = self.words.iter().position(|w| w == name).unwrap_or(0);
        // A name made with an expansion (`$X`, `"$(...)"`, a value, or
        // joined with text): tunectl cannot know which command it names,
        // and if it is `eval` or another builtin of the lists above, the
        // value runs. One quoted field with a `/` of its own is a path,
        // which never names a builtin or a function.
        if !readable(name) {
            return Some(UNKNOWN_NAME.to_string());
        }
        if is_path(name) {
            return None;
        }
        let args = &self.words[at + 1..];
        if READS_AS_CODE.contains(&name) {
            return Some(format!(
                "a value as an argument of `{name}`: bash reads it as code, arithmetic or a variable name (whose subscript runs `$(...)`); pass the value to a program, not to `{name}`"
            ));
        }
        if DECLARES.contains(&name) {
            // An unquoted expansion that is not an assignment may vanish
            // or split into options (`declare $X x={{ v }}`, X=-i).
            if args
                .iter()
                .any(|w| w.contains(MARK) && assigned_name(w).is_none())
            {
                return Some(format!(
                    "a value after an unquoted expansion among the arguments of `{name}`: it may split into options (`-i` evaluates the value as arithmetic); write the options plainly or quote the expansion"
                ));
            }
            if let Some(opt) = args.iter().find(|w| w.starts_with(['-', '+'])) {
                return Some(format!(
                    "a value in `{name} {opt}`: with an option bash may read the value as arithmetic, a list or a variable name; assign it plainly (`{name} X={{{{ v }}}}`)"
                ));
            }
            return match assigned_name(&self.cur) {
                Some(n) if PROMPTS.contains(&n) => Some(format!(
                    "a value assigned to {n}: bash expands its text again (a prompt when it shows it, BASH_ENV or ENV when a shell starts), so `$(...)` in a value runs"
                )),
                Some(_) => None,
                None => Some(format!(
                    "a value as a variable name of `{name}`: bash evaluates a name's subscript (`a[$(...)]` runs); write the name in the template (`{name} X={{{{ v }}}}`)"
                )),
            };
        }
        // Bash's printf reads options until its format: `-v` may come
        // again after the first name (`printf -v x -v {{ v }}`).
        if name == "printf" && args.last().is_some_and(|a| a == "-v") {
            return Some(
                "a value as the variable name of `printf -v`: bash evaluates a name's subscript (`a[$(...)]` runs); write the name in the template".to_string(),
            );
        }
        // An unquoted expansion where printf still reads options may
        // vanish or split into `-v` (`printf $X {{ v }}`, X=-v).
        let options_all = printf_options(args).count() == args.len();
        if name == "printf"
            && (printf_options(args).any(|w| w.contains(MARK))
                || (options_all && self.cur.contains(MARK)))
        {
            return Some(
                "a value after an unquoted expansion where `printf` reads its options: it may vanish or split into `-v`, and bash evaluates the variable name's subscript (`a[$(...)]` runs); quote the expansion".to_string(),
            );
        }
        if matches!(name, "test" | "[") && args.last().is_some_and(|a| a == "-v" || a == "-R") {
            return Some(format!(
                "a value after `{name} {}`: bash reads it as a variable name and evaluates its subscript (`a[$(...)]` runs)",
                args.last().map(String::as_str).unwrap_or("-v")
            ));
        }
        // An unquoted expansion before the value may vanish (`test -v $X
        // {{ v }}`) or split into `-v` (`test $X {{ v }}`, X=-v; also in
        // the value's own word, `[ $X{{ v }} ]`).
        if matches!(name, "test" | "[")
            && (args.iter().any(|w| w.contains(MARK)) || self.cur.contains(MARK))
        {
            return Some(format!(
                "a value after an unquoted expansion among the arguments of `{name}`: it may vanish or split into `-v`, and bash evaluates the variable name's subscript (`a[$(...)]` runs); quote the expansion (\"$X\")"
            ));
        }
        None
    }
}

/// The words of printf's arguments that it may still read as options:
/// those before its format (the first word that is neither an option nor
/// the name after `-v`), up to a `--`.
fn printf_options(args: &[String]) -> impl Iterator<Item = &String> {
    let mut name_next = false;
    args.iter().take_while(move |w| {
        if name_next {
            name_next = false;
            return true;
        }
        if w.as_str() == "--" {
            return false;
        }
        if w.as_str() == "-v" {
            name_next = true;
        }
        w.starts_with('-') || w.contains(MARK)
    })
}
