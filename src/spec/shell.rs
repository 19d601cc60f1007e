//! Where a template value lands in shell text, and how the command refers
//! to it there.
//!
//! A command template is shell text with `{{ }}` holes. No value is ever
//! written into that text: each hole becomes a reference to an environment
//! variable that holds the value (`"${TUNECTL_KNOB_V}"`), and the variable
//! is set in the command's environment (see `spec::template`). The shell
//! parses only the template's own text and the reference; the value is the
//! result of an expansion, which a POSIX shell never parses again as code.
//! So this module's reading of the shell grammar decides nothing about
//! safety: a wrong guess at a hole's context can only change how its
//! expansion is split (or leave `${...}` as literal text), never run a
//! value.
//!
//! [`scan`] reads the text around the holes the way a POSIX shell (and bash)
//! tokenises quotes, and says, for every hole, which form its reference
//! takes ([`Quoting`]: `"${X}"` in a plain word, `${X}` inside `"..."`), or
//! why the template is refused: where the shell would not expand the
//! reference (inside `'...'` or `$'...'`, in a comment, in a here-document)
//! the command would not see the value, and where an expansion is read as
//! code again (bash evaluates the text of `$((...))`, `((...))`) or where
//! the meaning is unclear (backticks, `${...}`, right after `$` or `\`,
//! after a `case` inside `$(...)`) the hole has no place. It runs twice:
//! when a study loads (on the template's source, tags removed, to report
//! the hole's line and column) and on every render (on the text actually
//! rendered, so that `{% if %}` branches cannot hide a quote from it).

use std::fmt;

mod evaluated;
use evaluated::Command;

/// One unit of shell text: a character of the template, or a value hole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    Char(char),
    /// The n-th value (0-based).
    Value(usize),
}

/// How a hole refers to its variable ([`reference`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quoting {
    /// A plain word (also after `=`, inside `$(...)`): `"${X}"`.
    Word,
    /// Inside `"..."`: `${X}`.
    Double,
}

/// A hole the template may not have there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Which value (0-based, in text order).
    pub value: usize,
    pub why: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// Top-level shell text.
    Top,
    /// `$(...)`, `<(...)`, `>(...)`: commands, with nested parentheses.
    Subst(u32),
    Double,
    Single,
    /// bash's `$'...'`.
    AnsiC,
    Backtick,
    /// `${...}`, with nested braces.
    Param(u32),
    /// `$((...))` or `((...))`, with nested parentheses.
    Arith(u32),
    /// bash's old `$[...]` arithmetic, with nested brackets.
    OldArith(u32),
    Comment,
    /// A here-document's body (its delimiter and line so far are kept
    /// beside the stack).
    Heredoc,
}

const CLOSE_QUOTES: &str =
    "close the quotes around it (`'--v='{{ v }}`): tunectl passes the value itself";

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn is_operator(c: char) -> bool {
    matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>')
}

/// The quoting of every value of `items`, in order, or the first value
/// that cannot be quoted where it stands.
pub fn scan(items: &[Item]) -> Result<Vec<Quoting>, Refusal> {
    let mut out: Vec<Quoting> = Vec::new();
    let mut stack = vec![Frame::Top];
    let mut word_start = true;
    // Here-documents announced on the current line: (delimiter, strip tabs).
    let mut pending: Vec<(String, bool)> = Vec::new();
    // A `case` inside `$(...)`: its patterns' `)` make the end of the
    // substitution unknowable without a full parser, so no value after it
    // is placed.
    let mut case_in_subst = false;
    // The body being read: delimiter, strip tabs, the line so far.
    let mut body: (String, bool, String) = Default::default();
    let ch = |i: usize| match items.get(i) {
        Some(Item::Char(c)) => Some(*c),
        _ => None,
    };
    let refuse = |value: usize, why: &str| Refusal {
        value,
        why: why.to_string(),
    };
    // The simple command being read at each command level: the template,
    // and each `$(...)` open (where bash may read a value as code).
    let mut levels: Vec<Command> = vec![Command::default()];
    // Names the template evaluates (in arithmetic, `[[ ]]`, `let`) or
    // gives an attribute (`declare -i`), and the values assigned to a
    // name: a value assigned to an evaluated name is read as code.
    let mut evaluated: std::collections::BTreeSet<String> = Default::default();
    let mut assigned: Vec<(usize, String)> = Vec::new();
    // Functions and aliases the template defines, and the commands each
    // value is part of (at each level): a value given to a function or an
    // alias of the template goes to code tunectl does not follow.
    let mut defined: std::collections::BTreeSet<String> = Default::default();
    let mut called: Vec<(usize, String)> = Vec::new();
    // Variables whose expansion is assigned to another (`y=$x`: (y, x)),
    // and the commands each variable's expansion is given to.
    let mut flows: Vec<(String, String)> = Vec::new();
    let mut given: Vec<(String, String)> = Vec::new();
    let mut arith_name = String::new();
    // After a `$`, the parameter's name is no text of the word: 1 while
    // reading a name, 2 for a special parameter's one character.
    let mut param_name = 0u8;
    // bash's old `$[...]` arithmetic: sh (dash) reads it as a `$` and a
    // `[`, so the text after it means one thing to bash and another to sh.
    let mut old_arith = false;
    let mut i = 0;
    while i < items.len() {
        let frame = stack.last().copied().unwrap_or(Frame::Top);
        let want = 1 + stack
            .iter()
            .filter(|f| matches!(f, Frame::Subst(_)))
            .count();
        for l in levels.iter_mut() {
            evaluated.extend(l.evaluated.drain(..));
            defined.extend(l.defined.drain(..));
            flows.append(&mut l.flows);
        }
        levels.truncate(want);
        levels.resize_with(want, Command::default);
        // A variable's expansion where bash would read a value again
        // (`eval $x`, `[[ $x -eq 1 ]]`, `unset "$x"`): the variable is
        // evaluated, and a value assigned to it is refused at the end. It
        // is followed through assignments (`y=$x`, `for y in $x`) and into
        // functions and aliases of the template.
        // `${x@P}` expands x's text as a prompt, running a `$(...)` in it.
        if !matches!(
            frame,
            Frame::Single | Frame::AnsiC | Frame::Comment | Frame::Heredoc
        ) && let Some(var) = evaluated::prompt_expanded_at(items, i)
        {
            evaluated.insert(var);
        }
        if matches!(frame, Frame::Top | Frame::Subst(_) | Frame::Double)
            && let Some(var) = evaluated::parameter_at(items, i)
        {
            let (outer, inner) = levels.split_at(levels.len() - 1);
            // Unquoted at a command's name, it is split into a command and
            // its arguments (`x={{ v }}; $x`): the value would be run.
            let split_at_name = frame != Frame::Double && inner.iter().any(Command::at_name);
            if split_at_name
                || inner.iter().any(|l| l.refusal().is_some())
                || outer.iter().any(|l| l.refusal_through_output().is_some())
            {
                evaluated.insert(var.clone());
            }
            for l in levels.iter() {
                if let Some(target) = l.assigned() {
                    flows.push((target, var.clone()));
                }
                if let Some(n) = l.name() {
                    given.push((var.clone(), n.to_string()));
                }
            }
        }
        let level = levels.last_mut().expect("the template's level");
        if !matches!(
            frame,
            Frame::Single | Frame::AnsiC | Frame::Comment | Frame::Heredoc
        ) && items[i] == Item::Char('$')
            && items.get(i + 1) == Some(&Item::Char('['))
        {
            old_arith = true;
        }
        let suppress = match (param_name, items[i]) {
            (1, Item::Char(c)) if c.is_ascii_alphanumeric() || c == '_' => true,
            (2, Item::Char(_)) => {
                param_name = 0;
                true
            }
            _ => {
                param_name = 0;
                false
            }
        };
        if matches!(frame, Frame::Top | Frame::Subst(_) | Frame::Double)
            && items[i] == Item::Char('$')
        {
            param_name = match items.get(i + 1) {
                Some(Item::Char(c)) if c.is_ascii_alphabetic() || *c == '_' => 1,
                Some(Item::Char(c)) if c.is_ascii_digit() || "#?@*$!-".contains(*c) => 2,
                _ => 0,
            };
        }
        // A name inside arithmetic, or inside `${...}` but the parameter
        // itself (`${!x}`, `${y:x}`, `${y[x]}` evaluate `x`).
        let plain_parameter = arith_name.is_empty()
            && i >= 2
            && items[i - 1] == Item::Char('{')
            && items[i - 2] == Item::Char('$');
        match items[i] {
            Item::Char(c)
                if (matches!(
                    frame,
                    Frame::Arith(_) | Frame::OldArith(_) | Frame::Backtick
                ) || (matches!(frame, Frame::Param(_)) && !plain_parameter))
                    && (c.is_ascii_alphanumeric() || c == '_') =>
            {
                arith_name.push(c);
            }
            _ => {
                if is_variable_name(&arith_name) {
                    evaluated.insert(std::mem::take(&mut arith_name));
                }
                arith_name.clear();
            }
        }
        // Whether the frame's characters belong to the current command's
        // words (quotes directly in the template or a `$(...)`).
        let in_command_quote =
            stack.len() >= 2 && matches!(stack[stack.len() - 2], Frame::Top | Frame::Subst(_));
        if let Item::Value(k) = items[i] {
            if old_arith {
                return Err(refuse(
                    k,
                    "a value after bash's old `$[...]` arithmetic: sh (dash) does not know it and reads the text after it otherwise than bash does (a `;`, a here-document); use $((...)) and compute in the template (`{{ n * 2 }}`)",
                ));
            }
            // Quoted, or in a `$(...)`, inside arithmetic or `${...}`:
            // bash still evaluates what it becomes there (an offset, a
            // subscript, an operand).
            if !matches!(
                frame,
                Frame::Param(_) | Frame::Arith(_) | Frame::OldArith(_)
            ) {
                if stack
                    .iter()
                    .any(|f| matches!(f, Frame::Arith(_) | Frame::OldArith(_)))
                {
                    return Err(refuse(
                        k,
                        "a value inside $((...)), ((...)) or $[...] (quoted there too): arithmetic evaluates the text of an expansion as code (bash runs `$(...)` in an array subscript there); compute in the template (`{{ n * 2 }}`)",
                    ));
                }
                if stack.iter().any(|f| matches!(f, Frame::Param(_))) {
                    return Err(refuse(
                        k,
                        "a value inside ${...} (quoted there too): bash evaluates an offset or a subscript there as code; write the default in the template (`{{ x or 'd' }}`)",
                    ));
                }
            }
            let q = match frame {
                _ if case_in_subst => {
                    return Err(refuse(
                        k,
                        "a value after a `case` inside `$(...)`: tunectl cannot tell where the `$(` ends; move the `case` into a script",
                    ));
                }
                Frame::Top | Frame::Subst(_) => Quoting::Word,
                Frame::Double => Quoting::Double,
                Frame::Single => {
                    return Err(refuse(
                        k,
                        &format!(
                            "a value inside '...': the shell expands nothing there, and tunectl hands a value to the command as an expansion (\"${{...}}\"); {CLOSE_QUOTES}; in a string that another shell runs (hyperfine, sh -c), read the variable there instead: '... \"$TUNECTL_KNOB_<NAME>\"'"
                        ),
                    ));
                }
                Frame::AnsiC => {
                    return Err(refuse(
                        k,
                        &format!("a value inside $'...' (escapes are read there); {CLOSE_QUOTES}"),
                    ));
                }
                Frame::Backtick => {
                    return Err(refuse(
                        k,
                        "a value inside backticks (`...`): their text is read again with its own rules of backslashes; use $(...)",
                    ));
                }
                Frame::Param(_) => {
                    return Err(refuse(
                        k,
                        "a value inside ${...}: write the default in the template (`{{ x or 'd' }}`)",
                    ));
                }
                Frame::Arith(_) | Frame::OldArith(_) => {
                    return Err(refuse(
                        k,
                        "a value inside $((...)), ((...)) or $[...]: arithmetic evaluates the text of an expansion as code (bash runs `$(...)` in an array subscript there); compute in the template (`{{ n * 2 }}`)",
                    ));
                }
                Frame::Comment => {
                    return Err(refuse(
                        k,
                        "a value inside a shell comment: the command would never see it",
                    ));
                }
                Frame::Heredoc => {
                    return Err(refuse(
                        k,
                        "a value inside a here-document: pass it as an argument, or read `$TUNECTL_KNOB_<NAME>` in the program",
                    ));
                }
            };
            if let Some(why) = level.refusal() {
                return Err(refuse(k, &why));
            }
            // Inside a `$(...)`, the value may be what the substitution
            // prints: each command level around it reads that output where
            // the `$(` stands (`[[ $(echo {{ v }}) -eq 1 ]]`, `let x=$(...)`).
            if let Some(why) = levels[..levels.len() - 1]
                .iter()
                .rev()
                .find_map(Command::refusal_through_output)
            {
                return Err(refuse(
                    k,
                    &format!("{why} (the value is inside a `$(...)` whose output stands there)"),
                ));
            }
            // Assigned directly, or through the `$(...)` it is part of.
            assigned.extend(levels.iter().filter_map(Command::assigned).map(|n| (k, n)));
            called.extend(
                levels
                    .iter()
                    .filter_map(|l| l.name().map(|n| (k, n.to_string()))),
            );
            let level = levels.last_mut().expect("the template's level");
            level.quoted_mark();
            out.push(q);
            word_start = false;
            i += 1;
            continue;
        }
        let c = ch(i).unwrap_or('\0');
        let next = items.get(i + 1).copied();
        let next_value = |what: &str| -> Option<Refusal> {
            match next {
                Some(Item::Value(k)) => Some(refuse(k, what)),
                _ => None,
            }
        };
        match frame {
            Frame::Top | Frame::Subst(_) => {
                let was_word_start = word_start;
                word_start = false;
                match c {
                    '\\' => match ch(i + 1) {
                        Some('\n') | None => {}
                        Some(n) => level.push(n),
                    },
                    '$' | '`' => level.mark(),
                    '\'' | '"' => {}
                    '#' if was_word_start => {}
                    '(' if was_word_start && ch(i + 1) == Some('(') => level.mark(),
                    '<' | '>' if ch(i + 1) == Some('(') => level.mark(),
                    '<' | '>' => level.redirection(c),
                    ')' if matches!(stack.last(), Some(Frame::Subst(0))) => {}
                    '(' | ')' | '\n' | ';' | '&' | '|' => level.operator(c),
                    c if is_blank(c) => level.blank(c),
                    _ if suppress => {}
                    c => level.push(c),
                }
                match c {
                    '\\' => {
                        if let Some(r) = next_value(
                            "a value right after a backslash: the backslash would escape the first character of the reference that stands for it; remove the backslash",
                        ) {
                            return Err(r);
                        }
                        // A line continuation is removed as if it were not
                        // there: a word may still start after it.
                        if ch(i + 1) == Some('\n') {
                            word_start = was_word_start;
                        }
                        i += 2;
                        continue;
                    }
                    '$' => {
                        let depth = stack.len();
                        if let Some(r) = dollar(items, i, &mut stack, false) {
                            return Err(r);
                        }
                        // A word starts inside a new `$(`; after `$x`,
                        // `$#`, `${...}`, `$((...))` the word goes on (a
                        // `#` there is no comment).
                        word_start = opened_commands(&stack, depth);
                        i += dollar_len(items, i, false);
                        continue;
                    }
                    '\'' => stack.push(Frame::Single),
                    '"' => stack.push(Frame::Double),
                    '`' => stack.push(Frame::Backtick),
                    '#' if was_word_start => stack.push(Frame::Comment),
                    '(' if was_word_start && ch(i + 1) == Some('(') => {
                        stack.push(Frame::Arith(0));
                        i += 2;
                        continue;
                    }
                    '<' | '>' if ch(i + 1) == Some('(') => {
                        stack.push(Frame::Subst(0));
                        word_start = true;
                        i += 2;
                        continue;
                    }
                    '<' if ch(i + 1) == Some('<') && ch(i + 2) == Some('<') => {
                        // bash's here-string: a plain word follows.
                        word_start = true;
                        i += 3;
                        continue;
                    }
                    '<' if ch(i + 1) == Some('<') => {
                        let (delim, strip, end) = heredoc_delimiter(items, i + 2)?;
                        pending.push((delim, strip));
                        word_start = true;
                        i = end;
                        continue;
                    }
                    '(' => {
                        if let Some(Frame::Subst(d)) = stack.last_mut() {
                            *d += 1;
                        }
                        word_start = true;
                    }
                    ')' => {
                        // The end of a `$(...)` goes on with the word it is
                        // part of (`$(x)#y` is one word); any other `)` is
                        // an operator, after which a word starts.
                        word_start = true;
                        match stack.last_mut() {
                            Some(Frame::Subst(0)) => {
                                stack.pop();
                                word_start = false;
                            }
                            Some(Frame::Subst(d)) => *d -= 1,
                            _ => {}
                        }
                    }
                    '\n' => {
                        word_start = true;
                        if !pending.is_empty() {
                            let (d, s) = pending.remove(0);
                            body = (d, s, String::new());
                            stack.push(Frame::Heredoc);
                        }
                    }
                    c if is_blank(c) || is_operator(c) => word_start = true,
                    'c' if was_word_start
                        && matches!(frame, Frame::Subst(_))
                        && ch(i + 1) == Some('a')
                        && ch(i + 2) == Some('s')
                        && ch(i + 3) == Some('e')
                        && ch(i + 4).is_some_and(|c| is_blank(c) || c == '\n') =>
                    {
                        case_in_subst = true;
                    }
                    _ => {}
                }
                i += 1;
            }
            Frame::Double => {
                if in_command_quote {
                    match c {
                        '\\' => match ch(i + 1) {
                            Some(n @ ('$' | '`' | '"' | '\\')) => level.push(n),
                            Some('\n') => {}
                            _ => level.push('\\'),
                        },
                        '$' | '`' => level.quoted_mark(),
                        '"' => {}
                        _ if suppress => {}
                        c => level.push(c),
                    }
                }
                match c {
                    '\\' => {
                        if let Some(r) = next_value(
                            "a value right after a backslash: the backslash would escape the first character of the reference that stands for it; remove the backslash",
                        ) {
                            return Err(r);
                        }
                        if matches!(ch(i + 1), Some('$' | '`' | '"' | '\\' | '\n')) {
                            i += 2;
                            continue;
                        }
                    }
                    '$' => {
                        let depth = stack.len();
                        if let Some(r) = dollar(items, i, &mut stack, true) {
                            return Err(r);
                        }
                        word_start = opened_commands(&stack, depth);
                        i += dollar_len(items, i, true);
                        continue;
                    }
                    '`' => stack.push(Frame::Backtick),
                    '"' => {
                        stack.pop();
                    }
                    _ => {}
                }
                i += 1;
            }
            Frame::Single => {
                if c == '\'' {
                    stack.pop();
                } else if in_command_quote {
                    level.push(c);
                }
                i += 1;
            }
            Frame::AnsiC => {
                if in_command_quote && c != '\'' {
                    // (Escapes are not decoded: a word with one names no
                    // builtin.)
                    level.push(c);
                }
                match c {
                    '\\' => {
                        // Skip the escaped character; a value is never
                        // skipped (it is refused in this context next).
                        i += if ch(i + 1).is_some() { 2 } else { 1 };
                        continue;
                    }
                    '\'' => {
                        stack.pop();
                    }
                    _ => {}
                }
                i += 1;
            }
            Frame::Backtick => {
                match c {
                    '\\' => {
                        // Skip the escaped character; a value is never
                        // skipped (it is refused in this context next).
                        i += if ch(i + 1).is_some() { 2 } else { 1 };
                        continue;
                    }
                    '`' => {
                        stack.pop();
                    }
                    _ => {}
                }
                i += 1;
            }
            Frame::Param(d) => {
                let in_double = stack.len() >= 2 && stack[stack.len() - 2] == Frame::Double;
                match c {
                    '\\' => {
                        // Skip the escaped character; a value is never
                        // skipped (it is refused in this context next).
                        i += if ch(i + 1).is_some() { 2 } else { 1 };
                        continue;
                    }
                    '$' => {
                        if let Some(r) = dollar(items, i, &mut stack, in_double) {
                            return Err(r);
                        }
                        i += dollar_len(items, i, in_double);
                        continue;
                    }
                    '{' => {
                        if let Some(Frame::Param(d)) = stack.last_mut() {
                            *d += 1;
                        }
                    }
                    '}' => {
                        if d == 0 {
                            stack.pop();
                        } else if let Some(Frame::Param(d)) = stack.last_mut() {
                            *d -= 1;
                        }
                    }
                    '\'' if !in_double => stack.push(Frame::Single),
                    '"' => stack.push(Frame::Double),
                    '`' => stack.push(Frame::Backtick),
                    _ => {}
                }
                i += 1;
            }
            Frame::Arith(d) | Frame::OldArith(d) => {
                // `$((...))` nests `(`, bash's `$[...]` nests `[`.
                let old = matches!(frame, Frame::OldArith(_));
                let (open, close) = if old { ('[', ']') } else { ('(', ')') };
                match c {
                    '$' => {
                        if let Some(r) = dollar(items, i, &mut stack, false) {
                            return Err(r);
                        }
                        i += dollar_len(items, i, false);
                        continue;
                    }
                    c if c == open => {
                        if let Some(Frame::Arith(d) | Frame::OldArith(d)) = stack.last_mut() {
                            *d += 1;
                        }
                    }
                    c if c == close => {
                        if d == 0 {
                            stack.pop();
                            if !old && ch(i + 1) == Some(')') {
                                i += 1;
                            }
                        } else if let Some(Frame::Arith(d) | Frame::OldArith(d)) = stack.last_mut()
                        {
                            *d -= 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            Frame::Comment => {
                if c == '\n' {
                    // The newline ends the comment and is then read as text.
                    stack.pop();
                    continue;
                }
                i += 1;
            }
            Frame::Heredoc => {
                if c == '\n' {
                    let (delim, strip, line) = &mut body;
                    let text = if *strip {
                        line.trim_start_matches('\t')
                    } else {
                        line.as_str()
                    };
                    if text == delim.as_str() {
                        stack.pop();
                        if !pending.is_empty() {
                            let (d, s) = pending.remove(0);
                            body = (d, s, String::new());
                            stack.push(Frame::Heredoc);
                        } else {
                            word_start = true;
                        }
                    } else {
                        line.clear();
                    }
                } else if body.2.len() <= body.0.len() + 64 {
                    // (Only a line as short as the delimiter can end it.)
                    body.2.push(c);
                }
                i += 1;
            }
        }
    }
    for l in levels.iter_mut() {
        l.end_word();
        evaluated.extend(l.evaluated.drain(..));
        defined.extend(l.defined.drain(..));
        flows.append(&mut l.flows);
    }
    if is_variable_name(&arith_name) {
        evaluated.insert(arith_name);
    }
    let any = defined.contains(evaluated::ANY_NAME);
    if let Some((k, name)) = called
        .iter()
        .find(|(_, n)| !evaluated::is_path(n) && (any || defined.contains(n.as_str())))
    {
        return Err(refuse(
            *k,
            &format!(
                "a value given to `{name}`, which the template defines as a function or an alias, or may (with `eval`, `.` or `source`, an alias whose name is made with an expansion, or a command whose name tunectl cannot read given arguments: `$X alias r=eval`): the body, which tunectl does not follow, may read the value as code (`eval \"$1\"`); call the program by its path (`./run`, `/usr/bin/python`), or pass the value in the environment (`\"$TUNECTL_KNOB_<NAME>\"`)"
            ),
        ));
    }
    // A variable given to a function or an alias of the template is
    // evaluated as a value given there would be; and what flows into an
    // evaluated variable is evaluated too (`y=$x; eval "$y"`).
    evaluated.extend(
        given
            .iter()
            .filter(|(_, n)| !evaluated::is_path(n) && (any || defined.contains(n.as_str())))
            .map(|(v, _)| v.clone()),
    );
    loop {
        let more: Vec<String> = flows
            .iter()
            .filter(|(to, from)| evaluated.contains(to) && !evaluated.contains(from))
            .map(|(_, from)| from.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        evaluated.extend(more);
    }
    if let Some((k, name)) = assigned.iter().find(|(_, n)| evaluated.contains(n)) {
        return Err(refuse(
            *k,
            &format!(
                "a value assigned to `{name}`, which the template evaluates (in arithmetic, `let`, `[[ ]]`), declares with an option (`declare -i {name}`), or expands where bash reads a value again (`eval \"${name}\"`, `unset ${name}`, a function or an alias of the template; also through another variable, `y=${name}`): bash reads the value as code there; give the value to the program, or compute in the template (`{{{{ n * 2 }}}}`)"
            ),
        ));
    }
    Ok(out)
}

/// Whether the `$` just read opened a command substitution (the stack was
/// `depth` deep before it): commands, so words, start inside.
fn opened_commands(stack: &[Frame], depth: usize) -> bool {
    stack.len() > depth && matches!(stack.last(), Some(Frame::Subst(_)))
}

/// What a `$` at `i` opens (pushed on `stack`), or a refusal when a value
/// follows it directly.
fn dollar(items: &[Item], i: usize, stack: &mut Vec<Frame>, in_double: bool) -> Option<Refusal> {
    let ch = |j: usize| match items.get(j) {
        Some(Item::Char(c)) => Some(*c),
        _ => None,
    };
    if let Some(Item::Value(k)) = items.get(i + 1) {
        return Some(Refusal {
            value: *k,
            why: "a value right after `$`: it would name a variable or open an expansion; put the `$` inside the value's text or drop it".to_string(),
        });
    }
    match (ch(i + 1), ch(i + 2)) {
        (Some('('), Some('(')) => stack.push(Frame::Arith(0)),
        (Some('('), _) => stack.push(Frame::Subst(0)),
        (Some('['), _) => stack.push(Frame::OldArith(0)),
        (Some('{'), _) => stack.push(Frame::Param(0)),
        (Some('\''), _) if !in_double => stack.push(Frame::AnsiC),
        (Some('"'), _) if !in_double => stack.push(Frame::Double),
        _ => {}
    }
    None
}

/// How many items the `$` at `i` and what it opens take.
fn dollar_len(items: &[Item], i: usize, in_double: bool) -> usize {
    let ch = |j: usize| match items.get(j) {
        Some(Item::Char(c)) => Some(*c),
        _ => None,
    };
    match (ch(i + 1), ch(i + 2)) {
        (Some('('), Some('(')) => 3,
        (Some('(' | '{' | '['), _) => 2,
        (Some('\'' | '"'), _) if !in_double => 2,
        _ => 1,
    }
}

/// Read a here-document operator's delimiter word starting at `i` (just
/// after `<<`): (delimiter with quotes removed, strip tabs, index after it).
fn heredoc_delimiter(items: &[Item], mut i: usize) -> Result<(String, bool, usize), Refusal> {
    let ch = |j: usize| match items.get(j) {
        Some(Item::Char(c)) => Some(*c),
        _ => None,
    };
    let strip = ch(i) == Some('-');
    if strip {
        i += 1;
    }
    while ch(i).is_some_and(is_blank) {
        i += 1;
    }
    let mut delim = String::new();
    let mut quote: Option<char> = None;
    while let Some(item) = items.get(i) {
        match *item {
            Item::Value(k) => {
                return Err(Refusal {
                    value: k,
                    why: "a value as a here-document's delimiter: write the delimiter in the template".to_string(),
                });
            }
            Item::Char(c) => match quote {
                Some(q) if c == q => quote = None,
                Some(_) => delim.push(c),
                None if c == '\'' || c == '"' => quote = Some(c),
                None if c == '\\' => {
                    if let Some(n) = ch(i + 1) {
                        delim.push(n);
                        i += 1;
                    }
                }
                None if is_blank(c) || c == '\n' || is_operator(c) => break,
                None => delim.push(c),
            },
        }
        i += 1;
    }
    Ok((delim, strip, i))
}

/// Whether `name` can be a variable name in a reference: an ASCII
/// letter or `_`, then ASCII letters, digits and `_` (what POSIX `sh`
/// reads as a name inside `${...}`).
pub fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The text standing for the value of the variable `name` at a hole:
/// `"${name}"` in a plain word (one field, whatever the value), `${name}`
/// inside `"..."`. Only a [valid name](is_variable_name) is ever written;
/// `None` for any other.
pub fn reference(name: &str, quoting: Quoting) -> Option<String> {
    if !is_variable_name(name) {
        return None;
    }
    Some(match quoting {
        Quoting::Word => format!("\"${{{name}}}\""),
        Quoting::Double => format!("${{{name}}}"),
    })
}

/// A `{{ ... }}` of a template's source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    /// Byte offset of its `{{`.
    pub open: usize,
    /// Byte range of the text between `{{` and `}}`.
    pub body: std::ops::Range<usize>,
}

/// The template source as shell text: `{{ }}` holes become values, the
/// text of `{% raw %}` blocks stays, other tags and comments go. Also every
/// `{{ }}` of `source`, in order. Whitespace control (`{{-`, `-%}`) is
/// applied roughly; the render-time check sees the exact text.
pub fn source_items(source: &str) -> (Vec<Item>, Vec<Hole>) {
    let mut items = Vec::new();
    let mut holes = Vec::new();
    let mut i = 0;
    let mut strip_next = false;
    while i < source.len() {
        let rest = &source[i..];
        let open = ["{{", "{%", "{#"].iter().find(|o| rest.starts_with(**o));
        let Some(open) = open else {
            let c = rest.chars().next().unwrap_or(' ');
            if !(strip_next && c.is_whitespace()) {
                strip_next = false;
                items.push(Item::Char(c));
            }
            i += c.len_utf8();
            continue;
        };
        let close = match *open {
            "{{" => "}}",
            "{%" => "%}",
            _ => "#}",
        };
        let body_start = i + 2;
        let end = find_close(source, body_start, close, *open != "{#");
        let body = &source[body_start..end.min(source.len())];
        if body.starts_with('-') {
            while matches!(items.last(), Some(Item::Char(c)) if c.is_whitespace()) {
                items.pop();
            }
        }
        strip_next = body.ends_with('-');
        let after = (end + 2).min(source.len());
        match *open {
            "{{" => {
                items.push(Item::Value(holes.len()));
                holes.push(Hole {
                    open: i,
                    body: body_start..end.min(source.len()),
                });
                i = after;
            }
            "{%" if body.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace())
                == "raw" =>
            {
                // Literal text up to `{% endraw %}`.
                let mut j = after;
                let mut text_end = source.len();
                let mut next = source.len();
                while let Some(p) = source[j..].find("{%") {
                    let s = j + p;
                    let e = find_close(source, s + 2, "%}", true);
                    let b = &source[s + 2..e.min(source.len())];
                    if b.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace())
                        == "endraw"
                    {
                        text_end = s;
                        next = (e + 2).min(source.len());
                        break;
                    }
                    j = s + 2;
                }
                items.extend(source[after..text_end].chars().map(Item::Char));
                i = next;
            }
            _ => i = after,
        }
    }
    (items, holes)
}

/// Index of `close` after `from`, skipping string literals in expressions.
fn find_close(source: &str, from: usize, close: &str, strings: bool) -> usize {
    let b = source.as_bytes();
    let mut i = from;
    let mut quote: Option<u8> = None;
    while i < b.len() {
        match quote {
            Some(q) => {
                if b[i] == b'\\' {
                    i += 1;
                } else if b[i] == q {
                    quote = None;
                }
            }
            None => {
                if b[i..].starts_with(close.as_bytes()) {
                    return i;
                }
                if strings && (b[i] == b'\'' || b[i] == b'"') {
                    quote = Some(b[i]);
                }
            }
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(t: &str) -> Vec<Item> {
        source_items(t).0
    }

    fn check(t: &str) -> Result<Vec<Quoting>, String> {
        scan(&items(t)).map_err(|r| r.why)
    }

    #[test]
    fn quoting_follows_the_context() {
        use Quoting::*;
        assert_eq!(check("run {{ a }} --x={{ b }}"), Ok(vec![Word, Word]));
        assert_eq!(check("run \"--v={{ v }}\""), Ok(vec![Double]));
        assert_eq!(check("run '--v=' {{ w }}"), Ok(vec![Word]));
        assert_eq!(check("x=$(dirname {{ d }})/bin"), Ok(vec![Word]));
        assert_eq!(
            check("echo \"$(printf '%s' \"{{ a }}\") {{ b }}\""),
            Ok(vec![Double, Double])
        );
        assert_eq!(check("cat <<<{{ a }}"), Ok(vec![Word]));
        assert_eq!(check("echo a#b {{ a }}"), Ok(vec![Word]));
        // A `#` inside a word is no comment: after a closing quote, after
        // `$#` (in `$(...)` too), after `$(...)` (reported: the comment
        // was believed and the value after the newline misplaced).
        assert_eq!(check("echo \"$PWD\"#'\n' {{ v }}"), Ok(vec![Word]));
        assert_eq!(check("echo \"$PWD\"#\"\n{{ v }}\""), Ok(vec![Double]));
        assert_eq!(check("x=$(echo $#'\n' {{ v }})"), Ok(vec![Word]));
        assert_eq!(check("echo \"$HOME\"#\"\n{{ v }}\""), Ok(vec![Double]));
        assert_eq!(check("echo $(echo)#'\n' {{ v }}"), Ok(vec![Word]));
        assert_eq!(check("echo \"$(echo)\"#'\n' {{ v }}"), Ok(vec![Word]));
        // After an operator's `)` or a line continuation, it is.
        assert_eq!(check("(echo)#'\n{{ v }}"), Ok(vec![Word]));
        assert_eq!(check("echo \\\n#'\n{{ v }}"), Ok(vec![Word]));
        assert_eq!(check("echo \"it's\" {{ a }}"), Ok(vec![Word]));
        assert_eq!(check("echo '\\' {{ a }}"), Ok(vec![Word]));
        assert_eq!(check("echo \\\" {{ a }}"), Ok(vec![Word]));
        assert_eq!(
            check("cat <<EOF\nbody $x\nEOF\necho {{ a }}"),
            Ok(vec![Word])
        );
        assert_eq!(check("{% raw %}\"{% endraw %}{{ a }}\""), Ok(vec![Double]));
        assert_eq!(check("{# ' #}{{ a }}"), Ok(vec![Word]));
        assert_eq!(check("echo ${X:-d} {{ a }}"), Ok(vec![Word]));
        assert_eq!(check("echo $((1 + 2)) {{ a }}"), Ok(vec![Word]));
        assert_eq!(check("echo {{ '}}' }} {{ a }}"), Ok(vec![Word, Word]));
    }

    #[test]
    fn contexts_that_quoting_cannot_make_safe_are_refused() {
        for (t, why) in [
            ("echo `x {{ a }}`", "backticks"),
            ("echo \"`{{ a }}`\"", "backticks"),
            ("echo $(( {{ n }} * 2 ))", "arithmetic"),
            ("(( i = {{ n }} ))", "arithmetic"),
            ("echo ${X:-{{ a }}}", "${...}"),
            ("echo \"${X:-{{ a }}}\"", "${...}"),
            ("echo ${{ a }}", "after `$`"),
            ("echo \"${{ a }}\"", "after `$`"),
            ("echo \\{{ a }}", "backslash"),
            ("echo \"\\{{ a }}\"", "backslash"),
            ("echo x # {{ a }}", "comment"),
            ("cat <<EOF\n{{ a }}\nEOF", "here-document"),
            ("cat <<-'E O'\n\tx\n\t{{ a }}\n\tE O\n", "here-document"),
            ("cat <<{{ a }}", "delimiter"),
            ("echo $'{{ a }}'", "$'...'"),
            ("x=$(case a in a) echo {{ a }};; esac)", "`case`"),
            ("run '--v={{ v }}'", "inside '...'"),
            ("{% raw %}'{% endraw %}{{ a }}'", "inside '...'"),
            ("echo \"it's\" '{{ a }}'", "inside '...'"),
        ] {
            let err = check(t).expect_err(t);
            assert!(err.contains(why), "{t}: {err}");
        }
        // After the here-document ends, values are fine again.
        assert!(check("cat <<EOF\nx\nEOF\necho {{ a }}").is_ok());
    }

    /// Found by the shell differential (`[[ "${V}" -eq 1 ]]` ran
    /// `a[$(touch ...)]` under bash), and the other places where bash reads
    /// an expansion's text again, each checked under bash 5 with such a
    /// value.
    #[test]
    fn where_bash_reads_a_value_again_it_is_refused() {
        for (t, why) in [
            ("[[ {{ v }} -eq 1 ]]", "[[ ... ]]"),
            ("echo\nE\n[[ {{ v }} -eq 1 ]]", "[[ ... ]]"),
            ("echo |[[ {{ v }} -eq 1 ]]", "[[ ... ]]"),
            ("echo ;[[ \"{{ v }}\" -eq 1 ]]", "[[ ... ]]"),
            ("if [[ 1 -eq 1 && {{ v }} -gt 2 ]]; then :; fi", "[[ ... ]]"),
            ("[[ -v {{ v }} ]]", "[[ ... ]]"),
            ("x=$([[ {{ v }} -lt 3 ]] && echo)", "[[ ... ]]"),
            ("let x={{ v }}", "`let`"),
            ("builtin let x={{ v }}", "`let`"),
            ("eval echo {{ v }}", "`eval`"),
            ("trap {{ v }} EXIT", "`trap`"),
            (". {{ v }}", "`.`"),
            ("read {{ v }} </dev/null", "`read`"),
            ("alias x={{ v }}", "`alias`"),
            ("compgen -C {{ v }} x", "`compgen`"),
            ("unset {{ v }}", "`unset`"),
            ("declare -i x={{ v }}", "`declare -i`"),
            ("declare -a z={{ v }}", "`declare -a`"),
            ("declare -n r={{ v }}", "`declare -n`"),
            ("declare a[{{ v }}]=1", "variable name of `declare`"),
            ("export {{ v }}", "variable name of `export`"),
            ("export PS4={{ v }}", "PS4"),
            ("PS4={{ v }} bash -x run", "PS4"),
            ("BASH_ENV={{ v }} bash run.sh", "BASH_ENV"),
            ("jobs -x eval {{ v }}", "`jobs`"),
            ("wait -n -p {{ v }}", "`wait`"),
            (
                "select x in {{ v }}; do let y=x; done",
                "a value assigned to `x`",
            ),
            // Found by the differential at 03a225e, under dash: the value
            // split at a command's name, through a variable.
            (
                "echo \"a\"x=[[ x=eval;x={{ v }}{{ v }}\nE\n$x $[",
                "a value assigned to `x`",
            ),
            ("x={{ v }}; $x", "a value assigned to `x`"),
            ("x={{ v }}; exec $x", "a value assigned to `x`"),
            ("x={{ v }}; y=$x; $y --n 1", "a value assigned to `x`"),
            ("export ENV={{ v }}", "ENV"),
            ("a[{{ v }}]=1", "array subscript"),
            ("z=([{{ v }}]=1)", "NAME=(...)"),
            ("printf -v {{ v }} x", "`printf -v`"),
            ("test -v {{ v }}", "`test -v`"),
            ("[ -v x{{ v }} ]", "`[ -v`"),
            ("echo \"${PWD:\"{{ v }}\"}\"", "${...}"),
            ("x=(1); echo \"${x[\"{{ v }}\"]}\"", "${...}"),
            ("echo $[ {{ v }} ]", "$[...]"),
            ("echo $[ \"{{ v }}\" ]", "$[...]"),
            // Found by the differential under dash, which reads `$[` as
            // text: the `;` and the here-document inside it count there.
            ("echo $[ set -x;eval  -eq 1 ]]trap {{ v }}", "$[...]"),
            (
                "echo let $[<<'E'\n]=1\"{{ v }}{{ v }}'a'\nE\n{{ v }}",
                "$[...]",
            ),
            ("echo $(( $(echo {{ v }}) ))", "arithmetic"),
            (
                "for (( i=0; i<\"{{ v }}\"; i++ )); do :; done",
                "arithmetic",
            ),
            // Found next by the differential: an unquoted expansion as the
            // command's name (empty, so the next word is the command), a
            // subscript with a blank in it, an attribute given earlier.
            (
                "echo \n$read declare -i x={{ v }}export PS4=",
                "made with an expansion",
            ),
            ("$let eval {{ v }}", "made with an expansion"),
            (
                "echo  set -x;$builtin eval {{ v }}",
                "made with an expansion",
            ),
            // And then: an empty `$()` before `eval` or `let`.
            (
                "echo printf -v ;$()eval x={{ v }} -eq 1 ]] ",
                "made with an expansion",
            ),
            (
                "echo let ]=1 set -x;$()let {{ v }}",
                "made with an expansion",
            ),
            ("\"$X\"eval {{ v }}", "made with an expansion"),
            ("e$()val {{ v }}", "made with an expansion"),
            ("a[test -v {{ v }}]=1", "array subscript"),
            ("declare -i x=\nx={{ v }}", "declares with an option"),
            ("x={{ v }}; echo $((x + 1))", "evaluates"),
            ("x={{ v }}; echo $(( $x ))", "evaluates"),
            ("x={{ v }}; let y=x", "evaluates"),
            ("x={{ v }} run; [[ x -eq 1 ]]", "evaluates"),
            ("for x in {{ v }}; do echo $((x)); done", "evaluates"),
            ("x=$(echo {{ v }}); declare -i x", "declares with an option"),
            ("function f { let x={{ v }}; }", "`let`"),
            ("f() { eval {{ v }}; }", "`eval`"),
            ("printf -v x '%s' {{ v }}; echo $((x))", "evaluates"),
            ("x={{ v }}; echo \"${!x}\"", "evaluates"),
            ("x={{ v }}; echo \"${PWD:x}\"", "evaluates"),
            // Found by the differential at 8a91d46: bash reads an open
            // subscript to its `]` across newlines, operators and
            // redirections.
            ("echo  set -x;\nE\na[\nE\n{{ v }}]=1 ", "array subscript"),
            ("a[x;{{ v }}]=1", "array subscript"),
            ("a[x>{{ v }}]=1", "array subscript"),
            ("declare a[x\n{{ v }}]=1", "variable name of `declare`"),
            // A value inside `$(...)` is what it may print: the command
            // around the `$(` reads it there.
            ("[[ $(echo {{ v }}) -eq 1 ]]", "output stands there"),
            (
                "[[ \"$(printf %s {{ v }})\" -eq 1 ]]",
                "output stands there",
            ),
            ("a[$(echo {{ v }})]=1", "output stands there"),
            ("let x=$(echo {{ v }})", "output stands there"),
            ("eval \"$(echo {{ v }})\"", "output stands there"),
            ("test -v $(echo {{ v }})", "output stands there"),
            ("declare -i x=$(echo {{ v }})", "output stands there"),
            // Found by the differential under dash at e9e07a1: what an
            // unquoted `$(...)` prints, at a command's name, is split into
            // a command and its arguments.
            (
                "echo \nE\n$(echo {{ v }}\nE\n)",
                "stands as a command's name",
            ),
            ("x=1 $(printf %s {{ v }})", "stands as a command's name"),
            ("exec $(echo {{ v }})", "stands as a command's name"),
            ("! $(echo {{ v }}) && run", "stands as a command's name"),
            // Found by the differential at df9a779: a second `-v`.
            (
                "echo \nE\nprintf -v printf -v {{ v }} {{ v }}PS4= -eq 1 ]]",
                "`printf -v`",
            ),
            ("printf -v x -v {{ v }} '%s' 1", "`printf -v`"),
            // Found by the differential at 2e32302: `}` read as the end of
            // a group where it is an argument (dash ran `eval`), and a `=`
            // inside a subscript taken for the assignment's (bash ran
            // `a[x=case "${V}"]=1`).
            ("echo \neval test -v } {{ v }}{{ v }}$#", "`eval`"),
            ("eval } {{ v }}", "`eval`"),
            (
                "echo export |a[PS4=x=case {{ v }}]=1{{ v }}",
                "array subscript",
            ),
            ("a[x=1 {{ v }}]=1", "array subscript"),
            ("a[x=c{{ v }}]=1", "array subscript"),
            // Found reading them: a subscripted assignment before the
            // command's name is an assignment for bash, which runs the
            // command after it; and an element of a `declare -i` array.
            ("a[1]=2 eval {{ v }}", "`eval`"),
            ("a[i]=2 x=3 let {{ v }}", "`let`"),
            ("declare -i a\na[1]={{ v }}", "declares with an option"),
            // Found by the differential at 2d9d058 (bash --posix): an
            // empty unquoted expansion vanishes, and the value becomes the
            // name `test -v` reads. One that splits may give the `-v`.
            (
                "echo {{ v }}printf -v  set -x;test -v $case {{ v }}",
                "unquoted expansion among the arguments of `test`",
            ),
            (
                "test -v $x {{ v }}",
                "unquoted expansion among the arguments of `test`",
            ),
            (
                "test $x {{ v }}",
                "unquoted expansion among the arguments of `test`",
            ),
            (
                "[ $x{{ v }} ]",
                "unquoted expansion among the arguments of `[`",
            ),
            (
                "[ x$y {{ v }} ]",
                "unquoted expansion among the arguments of `[`",
            ),
            ("printf $x {{ v }}", "where `printf` reads its options"),
            ("printf -v $x {{ v }}", "where `printf` reads its options"),
            ("printf $x{{ v }} y", "where `printf` reads its options"),
            (
                "declare $x y={{ v }}",
                "unquoted expansion among the arguments of `declare`",
            ),
            (
                "export $x Y={{ v }}",
                "unquoted expansion among the arguments of `export`",
            ),
            // Found by the differential at 9ec632a, under dash: the
            // substitution prints `eval`, which becomes the command.
            (
                "echo \nE\n$(echo eval '\n')x={{ v }}{{ v }}PS4=",
                "name is made with an expansion",
            ),
            // A name tunectl cannot read: it may be `eval`.
            ("$(echo eval) x={{ v }}", "name is made with an expansion"),
            ("\"$(echo eval)\" {{ v }}", "name is made with an expansion"),
            ("$(echo ev)al {{ v }}", "name is made with an expansion"),
            ("`echo eval` {{ v }}", "name is made with an expansion"),
            ("x=eval; $x {{ v }}", "name is made with an expansion"),
            ("echo eval; $_ {{ v }}", "name is made with an expansion"),
            ("$X{{ v }}", "name is made with an expansion"),
            (
                "{{ program }} --x {{ v }}",
                "name is made with an expansion",
            ),
            (
                "command {{ program }} {{ v }}",
                "name is made with an expansion",
            ),
            (
                "\"$PYTHON\" train.py --x {{ v }}",
                "name is made with an expansion",
            ),
            (
                "$PYTHON train.py --x {{ v }}",
                "name is made with an expansion",
            ),
            ("$VENV/bin/python {{ v }}", "name is made with an expansion"),
            ("{{ v }}$X {{ v }}", "name is made with an expansion"),
            // Functions and aliases of the template: their bodies are code
            // tunectl does not follow (dash and bash --posix expand an
            // alias in a script).
            (
                "alias r=eval\nr {{ v }}",
                "defines as a function or an alias",
            ),
            (
                "f() { eval \"$1\"; }; f {{ v }}",
                "defines as a function or an alias",
            ),
            (
                "function g { eval \"$1\"; }\ng {{ v }}",
                "defines as a function or an alias",
            ),
            (
                "function g() { :; }\ng {{ v }}",
                "defines as a function or an alias",
            ),
            (
                "g {{ v }}; g () { eval \"$1\"; }",
                "defines as a function or an alias",
            ),
            (
                "f() { eval \"$1\"; }; f \"$(echo {{ v }})\"",
                "defines as a function or an alias",
            ),
            (
                "alias $a=eval\nrun {{ v }}",
                "defines as a function or an alias",
            ),
            // Found by the differential at 9f77d17, under dash: `$x` is
            // empty, so `alias` defines `r`.
            (
                "echo ;read \n$x alias r=eval\n{{ v }}\nE\nr {{ v }}\n)PS4=",
                "defines as a function or an alias",
            ),
            (
                "$x alias r=eval\nrun {{ v }}",
                "defines as a function or an alias",
            ),
            (
                "$(echo alias) r=eval\nrun {{ v }}",
                "defines as a function or an alias",
            ),
            (
                "{{ w }} r=eval\nr {{ v }}",
                "defines as a function or an alias",
            ),
            (
                "eval 'f() { eval \"$1\"; }'; f {{ v }}",
                "defines as a function or an alias",
            ),
            (
                ". ./env.sh; run {{ v }}",
                "defines as a function or an alias",
            ),
            // Found by the differential at d1a0a45, under dash: the value
            // reached `eval` through a variable.
            (
                "echo alias r=eval\nx={{ v }}export  set -x;eval trap $x [ -v ",
                "a value assigned to `x`",
            ),
            ("x={{ v }}; eval \"$x\"", "a value assigned to `x`"),
            ("x={{ v }}; [[ $x -eq 1 ]]", "a value assigned to `x`"),
            ("x={{ v }}; unset \"${x}\"", "a value assigned to `x`"),
            ("x={{ v }}; test -v \"$x\"", "a value assigned to `x`"),
            ("x={{ v }}; declare -i y=$x", "a value assigned to `x`"),
            ("x={{ v }}; PS4=$x", "a value assigned to `x`"),
            ("x={{ v }}; $PYTHON t.py \"$x\"", "a value assigned to `x`"),
            ("x={{ v }}; y=$x; eval \"$y\"", "a value assigned to `x`"),
            (
                "x={{ v }}; for y in $x; do eval $y; done",
                "a value assigned to `x`",
            ),
            (
                "x={{ v }}; z=$(echo \"$x\"); let w=z",
                "a value assigned to `x`",
            ),
            (
                "f() { eval \"$1\"; }; x={{ v }}; f \"$x\"",
                "a value assigned to `x`",
            ),
            // Text that bash runs as code, and a variable named in it.
            (
                "x={{ v }}; trap 'eval \"$x\"' EXIT",
                "a value assigned to `x`",
            ),
            ("x={{ v }}; eval 'eval \"$x\"'", "a value assigned to `x`"),
            (
                "x={{ v }}; y='eval \"$x\"'; eval \"$y\"",
                "a value assigned to `x`",
            ),
            (
                "x={{ v }}; PS4='$(eval $x)'; set -x",
                "a value assigned to `x`",
            ),
            (
                "x={{ v }}; alias r='eval \"$x\"'",
                "a value assigned to `x`",
            ),
            // bash's prompt transformation, and code inside backticks.
            ("x={{ v }}; echo \"${x@P}\"", "a value assigned to `x`"),
            (
                "x={{ v }}; echo \"${y:-${x@P}}\"",
                "a value assigned to `x`",
            ),
            ("x={{ v }}; echo `eval \"$x\"`", "a value assigned to `x`"),
        ] {
            let err = check(t).expect_err(t);
            assert!(err.contains(why), "{t}: {err}");
        }
    }

    #[test]
    fn where_bash_takes_a_value_as_it_is_it_is_placed() {
        for t in [
            "export X={{ v }}",
            "export X={{ v }} Y=\"{{ w }}\"",
            "local x={{ v }}",
            "X={{ v }} run",
            "printf '%s' {{ v }}",
            "printf -v x '%s' {{ v }}",
            "[ {{ v }} -eq 1 ] && run",
            "test {{ v }} = x",
            "case {{ v }} in a) run;; esac",
            "[[ -d /tmp ]] && run {{ v }}",
            "[[ -d /tmp ]] && run $(echo {{ v }})",
            "x=$(python3 -c 'import sys; print(sys.argv[1])' {{ v }})",
            "run --n \"$(printf %s {{ v }})\"",
            "run $(echo {{ v }})",
            "x=$(echo {{ v }}) run",
            "\"$(echo {{ v }})\" --n 1",
            "if [[ -d /tmp ]]; then run {{ v }}; fi",
            "x=(1 2); run {{ v }}",
            "z=(a b) ; run {{ v }}",
            "echo let {{ v }}",
            "run --let {{ v }} eval",
            "echo \"[[ {{ v }} -eq 1 ]]\"",
            "f() { run {{ v }}; }; f",
            "echo ${X:-d} {{ v }}",
            "echo {{ v }} $[ 1 + 2 ]",
            "x={{ v }}; echo $((y + 1)); run \"$x\"",
            "for f in {{ v }}; do run \"$f\"; done",
            "a[1]=2; run {{ v }}",
            "x={{ v }}; run \"${x}\" \"${x:-d}\"",
            "echo } {{ v }}",
            "{ run {{ v }}; }",
            "a[1]={{ v }}; run \"${a[1]}\"",
            "declare a[1]={{ v }}",
            "printf '%s' $x {{ v }}",
            "printf \"$fmt\" {{ v }}",
            "test \"$x\" = {{ v }}",
            "declare x=$y z={{ v }}",
            // A name made with an expansion that has a `/` of its own,
            // outside it, in one field: a path, never a builtin.
            "./{{ program }} --x {{ v }}",
            "{{ program }}/bin/run --x {{ v }}",
            "\"$VENV\"/bin/python train.py --x {{ v }}",
            "\"$VENV/bin/python\" train.py --x {{ v }}",
            "command \"$HOME\"/run {{ v }}",
            // Functions the template does not define, and one it defines
            // but does not give a value to.
            "f() { run; }; run {{ v }}",
            "{{ v }}$X",
            "$PYTHON prep.py --n 1; run {{ v }}",
            "{{ w }} --n 1; run {{ v }}",
            "./prep.sh \"$X\" a=b; run {{ v }}",
            ". ./env.sh; ./run {{ v }}",
            "x={{ v }}; run \"$x\"; echo $x",
            "x={{ v }}; y=$x; run \"$y\"",
            "x={{ v }}; [ \"$x\" = a ] && run",
            "x={{ v }}; run \"$x\"; unset x",
            "x={{ v }}; y='a b'; run \"$x\" $y",
            "x={{ v }}; run \"$x\" `date`",
            "x={{ v }}; \"$x\" --n 1",
        ] {
            assert!(check(t).is_ok(), "{t}: {:?}", check(t));
        }
    }

    #[test]
    fn a_multibyte_character_inside_a_tag_is_no_problem() {
        // Found by the fuzzer: the end of a tag was searched byte by byte
        // with string slicing, which panicked inside a character.
        assert_eq!(
            check("run {{ aé }} \"{{ b }}\""),
            Ok(vec![Quoting::Word, Quoting::Double])
        );
        assert!(check("{% raw %}é{% endraw %}{{ \u{fffd} }}").is_ok());
    }

    #[test]
    fn a_value_after_a_backslash_in_any_context_is_seen() {
        // Found by the fuzzer: `\` inside `${...}` skipped the value after
        // it, which then had no quoting.
        for t in ["${\\{{ a }}", "$'\\{{ a }}'", "`\\{{ a }}`"] {
            assert!(check(t).is_err(), "{t}");
        }
    }

    #[test]
    fn holes_become_references_to_valid_names_only() {
        assert_eq!(
            reference("TUNECTL_KNOB_V", Quoting::Word).as_deref(),
            Some("\"${TUNECTL_KNOB_V}\"")
        );
        assert_eq!(reference("_a1", Quoting::Double).as_deref(), Some("${_a1}"));
        for bad in ["", "1a", "a-b", "a}", "a b", "é", "a;b", "A$(x)"] {
            assert_eq!(reference(bad, Quoting::Word), None, "{bad}");
        }
    }

    #[test]
    fn the_source_holes_are_found_with_their_bodies() {
        let t = "a {{ x }} {% raw %}{{ y }}{% endraw %}{{- '}}' ~ z -}}";
        let (_, holes) = source_items(t);
        let bodies: Vec<&str> = holes.iter().map(|h| &t[h.body.clone()]).collect();
        assert_eq!(bodies, vec![" x ", "- '}}' ~ z -"]);
        assert_eq!(holes[0].open, 2);
    }
}
