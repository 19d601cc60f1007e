//! The inventory file: the machines a study may run on.
//!
//! Every transport's fields are parsed and validated here, including those
//! whose executors are not built yet, so that an inventory written today
//! keeps working when they land.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use marked_yaml::Node;
use marked_yaml::types::MarkedMappingNode;
use serde::Serialize;
use ssh2_config::HostClause;

use super::diag::Diagnostics;
use super::hostpattern;
use super::yaml::{self, Walker, index, join};

#[derive(Debug, Clone, Serialize)]
pub struct Inventory {
    pub hosts: Vec<Host>,
    pub ledger: Option<String>,
    /// A shell command run on this machine when a launch ends, with the
    /// launch's outcome as JSON on its stdin (`launch --notify` wins).
    pub notify: Option<String>,
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Host {
    pub name: String,
    pub slots: u32,
    pub labels: BTreeMap<String, String>,
    /// Device each slot pins, in slot order; `None` means "slot index when
    /// the host has GPUs, nothing otherwise".
    pub devices: Option<Vec<String>>,
    /// The variable that pins a slot's device; `None`: the default for the
    /// vendor of the host's GPUs ([`default_device_env`]).
    pub device_env: Option<String>,
    pub transport: Transport,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "transport", rename_all = "lowercase")]
pub enum Transport {
    Local,
    Ssh(SshHost),
    Slurm(SlurmHost),
}

impl Transport {
    pub fn name(&self) -> &'static str {
        match self {
            Transport::Local => "local",
            Transport::Ssh(_) => "ssh",
            Transport::Slurm(_) => "slurm",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKeyChecking {
    Yes,
    AcceptNew,
}

#[derive(Debug, Clone, Serialize)]
pub struct SshHost {
    pub host: String,
    pub port: Option<u16>,
    pub user: Option<String>,
    pub identity_file: Option<String>,
    pub known_hosts_file: Option<String>,
    pub proxy_jump: Option<String>,
    #[serde(serialize_with = "ser_opt_secs")]
    pub connect_timeout: Option<Duration>,
    pub strict_host_key_checking: HostKeyChecking,
    pub workdir: Option<String>,
    pub max_sessions: u32,
    /// `ssh_config`: the ssh client configuration file to connect with
    /// (`ssh -F`), as a path on this machine; `None`: ssh's own files.
    pub ssh_config: Option<PathBuf>,
    /// Run trials through one persistent agent per slot (one long-lived
    /// session each); `false`: one session per attempt.
    pub agent: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SlurmHost {
    /// `local` or the name of an ssh host of the same inventory.
    pub login: String,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub gres: Option<String>,
    pub constraint: Option<String>,
    pub time_limit: Option<String>,
    pub sbatch_args: Vec<String>,
    pub max_jobs_in_flight: u32,
    pub array_throttle: Option<u32>,
    #[serde(serialize_with = "ser_secs")]
    pub poll_interval: Duration,
    pub shared_dir: Option<String>,
    /// A batch-script template replacing templates/slurm-array.sh; a
    /// relative path is taken from the inventory's directory.
    pub batch_template: Option<String>,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn ser_opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// Where the device variable of a host without `device_env` comes from:
/// the host's fingerprint (its GPUs' vendor).
pub use crate::fingerprint::{DEFAULT_DEVICE_ENV, default_device_env};

/// At most this many hosts in one inventory, host patterns expanded.
pub const MAX_INVENTORY_HOSTS: usize = 10_000;

/// A `hosts_file` larger than this is refused (10,000 hosts of 100 bytes).
const MAX_HOSTS_FILE_BYTES: u64 = 1 << 20;

impl Host {
    /// Trials this host runs (or keeps queued) at once: `slots`, or a Slurm
    /// entry's `max_jobs_in_flight`.
    pub fn concurrency(&self) -> u32 {
        match &self.transport {
            Transport::Slurm(s) => s.max_jobs_in_flight,
            _ => self.slots,
        }
    }
}

impl Inventory {
    /// The inventory used without `--inventory`: this machine, one slot.
    pub fn local_default() -> Inventory {
        Inventory {
            hosts: vec![Host {
                name: "local".to_string(),
                slots: 1,
                labels: BTreeMap::new(),
                devices: None,
                device_env: None,
                transport: Transport::Local,
            }],
            ledger: None,
            notify: None,
            source: None,
        }
    }

    pub fn load(path: &Path) -> Result<Inventory, Diagnostics> {
        let text = crate::safe_read::read_text(path, crate::safe_read::MAX_INVENTORY_FILE_BYTES)
            .map_err(|e| Diagnostics::whole_file(path, format!("cannot read file: {e}")))?;
        Self::from_text(path, &text)
    }

    pub fn from_text(path: &Path, text: &str) -> Result<Inventory, Diagnostics> {
        let root = yaml::parse_kind(path, text, INVENTORY_FILE)?;
        Self::from_node(path, &root)
    }

    fn from_node(path: &Path, root: &Node) -> Result<Inventory, Diagnostics> {
        let mut w = Walker::new(path);
        let inv = parse_inventory(&mut w, root);
        match inv {
            Some(mut inv) if w.diags.is_empty() => {
                inv.source = Some(path.to_path_buf());
                Ok(inv)
            }
            _ => Err(w.diags),
        }
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }
}

/// An inventory file, by its top-level keys (see [`yaml::parse_kind`]).
pub const INVENTORY_FILE: yaml::FileKind = yaml::FileKind {
    what: "inventory",
    keys: &["hosts", "ledger", "notify"],
};

fn parse_inventory(w: &mut Walker, root: &Node) -> Option<Inventory> {
    let map = w.mapping(root, "")?;
    w.check_keys(map, "", INVENTORY_FILE.keys);
    let ledger = map.get_node("ledger").and_then(|n| w.string(n, "ledger"));
    let notify = map.get_node("notify").and_then(|n| {
        let cmd = w.string(n, "notify")?;
        if cmd.trim().is_empty() {
            w.error_at(n, "notify", "an empty command");
            return None;
        }
        Some(cmd)
    });
    let hosts_node = w.required(map, "", "hosts")?;
    let seq = w.sequence(hosts_node, "hosts")?;
    if seq.is_empty() {
        w.error_at(hosts_node, "hosts", "the inventory lists no hosts");
        return None;
    }
    let mut hosts: Vec<Host> = Vec::new();
    // Host name → its index in `hosts`: patterns make inventories large.
    let mut names: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, item) in seq.iter().enumerate() {
        let field = index("hosts", i);
        let Some(h) = parse_host(w, item, &field) else {
            continue;
        };
        let node = |key: &str| {
            item.as_mapping()
                .and_then(|m| m.get_node(key))
                .unwrap_or(item)
        };
        let from_config = item
            .as_mapping()
            .and_then(|m| m.get_node("ssh_config_hosts"))
            .filter(|_| matches!(h.transport, Transport::Ssh(_)));
        if let Some(select) = from_config {
            let config = match &h.transport {
                Transport::Ssh(s) => s.ssh_config.clone(),
                _ => None,
            };
            let f = join(&field, "ssh_config_hosts");
            let Some(aliases) = hosts_of_ssh_config(w, select, &f, config.as_deref()) else {
                continue;
            };
            if hosts.len() + aliases.len() > MAX_INVENTORY_HOSTS {
                w.error_at(
                    select,
                    &f,
                    format!("the inventory names more than {MAX_INVENTORY_HOSTS} hosts"),
                );
                break;
            }
            for alias in aliases {
                let mut one = h.clone();
                one.name = format!("{}-{alias}", h.name);
                if let Transport::Ssh(s) = &mut one.transport {
                    s.host = alias.clone();
                }
                if names.contains_key(&one.name) {
                    w.error_at(
                        select,
                        &f,
                        format!(
                            "duplicate host name `{}` (ssh config host `{alias}`)",
                            one.name
                        ),
                    );
                    continue;
                }
                names.insert(one.name.clone(), hosts.len());
                hosts.push(one);
            }
            continue;
        }
        let from_file = item
            .as_mapping()
            .and_then(|m| m.get_node("hosts_file"))
            .filter(|_| matches!(h.transport, Transport::Ssh(_)));
        if let Some(file_node) = from_file {
            let Some(list) = hosts_of_file(w, file_node, &join(&field, "hosts_file")) else {
                continue;
            };
            if hosts.len() + list.len() > MAX_INVENTORY_HOSTS {
                w.error_at(
                    file_node,
                    &join(&field, "hosts_file"),
                    format!("the inventory names more than {MAX_INVENTORY_HOSTS} hosts"),
                );
                break;
            }
            for (dest, tag, line) in list {
                let mut one = h.clone();
                one.name = format!("{}-{tag}", h.name);
                if let Transport::Ssh(s) = &mut one.transport {
                    s.host = dest.clone();
                }
                if names.contains_key(&one.name) {
                    w.error_at(
                        file_node,
                        &join(&field, "hosts_file"),
                        format!(
                            "duplicate host name `{}` (host `{dest}` on line {line} of the hosts file)",
                            one.name
                        ),
                    );
                    continue;
                }
                names.insert(one.name.clone(), hosts.len());
                hosts.push(one);
            }
            continue;
        }
        let pattern = match &h.transport {
            Transport::Ssh(s) => Some(s.host.clone()),
            _ => None,
        };
        // An ssh host pattern is one entry per host it names, each called
        // `<name>-<the numbers it took>`, with the entry's settings.
        let expanded = match pattern.as_deref().map(hostpattern::expand) {
            None | Some(Ok(None)) => vec![h],
            Some(Ok(Some(list))) => list
                .into_iter()
                .map(|e| {
                    let mut one = h.clone();
                    one.name = format!("{}-{}", h.name, e.tag);
                    if let Transport::Ssh(s) = &mut one.transport {
                        s.host = e.host;
                    }
                    one
                })
                .collect(),
            Some(Err(e)) => {
                w.error_at(
                    node("host"),
                    &join(&field, "host"),
                    format!("host pattern {e}"),
                );
                continue;
            }
        };
        if hosts.len() + expanded.len() > MAX_INVENTORY_HOSTS {
            w.error_at(
                node("host"),
                &join(&field, "host"),
                format!("the inventory names more than {MAX_INVENTORY_HOSTS} hosts"),
            );
            break;
        }
        for h in expanded {
            if let Some(other) = names.get(&h.name).map(|&i| &hosts[i]) {
                let why = match &h.transport {
                    Transport::Ssh(s) if Some(&s.host) != pattern.as_ref() => format!(
                        "duplicate host name `{}` (host `{}` of the pattern `{}`; another entry is named so)",
                        h.name,
                        s.host,
                        pattern.as_deref().unwrap_or_default()
                    ),
                    _ => format!("duplicate host name `{}`", other.name),
                };
                w.error_at(node("name"), &join(&field, "name"), why);
                continue;
            }
            names.insert(h.name.clone(), hosts.len());
            hosts.push(h);
        }
    }
    // A slurm login node must be `local` or an ssh host of this inventory.
    for (i, item) in seq.iter().enumerate() {
        let Some(m) = item.as_mapping() else { continue };
        let Some(login_node) = m.get_node("login") else {
            continue;
        };
        let Some(login) = login_node.as_scalar().map(|s| s.as_str().to_string()) else {
            continue;
        };
        if login == "local" {
            continue;
        }
        match hosts.iter().find(|h| h.name == login) {
            Some(h) if matches!(h.transport, Transport::Ssh(_)) => {}
            Some(_) => w.error_at(
                login_node,
                &join(&index("hosts", i), "login"),
                format!("login host `{login}` must be an ssh host"),
            ),
            None => w.error_at(
                login_node,
                &join(&index("hosts", i), "login"),
                format!("no ssh host named `{login}` in this inventory (use `local` or an ssh host's name)"),
            ),
        }
    }
    Some(Inventory {
        hosts,
        ledger,
        notify,
        source: None,
    })
}

const COMMON_KEYS: &[&str] = &[
    "name",
    "transport",
    "slots",
    "labels",
    "devices",
    "device_env",
];
const SSH_KEYS: &[&str] = &[
    "host",
    "hosts_file",
    "ssh_config",
    "ssh_config_hosts",
    "port",
    "user",
    "identity_file",
    "known_hosts_file",
    "proxy_jump",
    "connect_timeout",
    "strict_host_key_checking",
    "workdir",
    "max_sessions",
    "agent",
];
const SLURM_KEYS: &[&str] = &[
    "login",
    "batch_template",
    "partition",
    "account",
    "qos",
    "gres",
    "constraint",
    "time_limit",
    "sbatch_args",
    "max_jobs_in_flight",
    "array_throttle",
    "poll_interval",
    "shared_dir",
];

fn parse_host(w: &mut Walker, node: &Node, field: &str) -> Option<Host> {
    let map = w.mapping(node, field)?;
    let name = yaml::required_name(w, map, field, "host");
    let transport_node = w.required(map, field, "transport")?;
    let transport_field = join(field, "transport");
    let transport_name = w.string(transport_node, &transport_field)?;
    let allowed: Vec<&str> = match transport_name.as_str() {
        "local" => COMMON_KEYS.to_vec(),
        "ssh" => COMMON_KEYS.iter().chain(SSH_KEYS).copied().collect(),
        "slurm" => COMMON_KEYS.iter().chain(SLURM_KEYS).copied().collect(),
        other => {
            w.error_at(
                transport_node,
                &transport_field,
                format!("unknown transport `{other}` (expected local, ssh or slurm)"),
            );
            return None;
        }
    };
    w.check_keys(map, field, &allowed);
    let slots = match map.get_node("slots") {
        Some(n) => w.u32_in(n, &join(field, "slots"), 1, 4096),
        None => Some(1),
    };
    let labels = match map.get_node("labels") {
        Some(n) => {
            let mut out = BTreeMap::new();
            if let Some(m) = w.mapping(n, &join(field, "labels")) {
                for (k, v) in m.iter() {
                    if let Some(val) = w.scalar(v, &join(&join(field, "labels"), k.as_str())) {
                        out.insert(k.as_str().to_string(), val.to_string());
                    }
                }
            }
            out
        }
        None => BTreeMap::new(),
    };
    let devices = match map.get_node("devices") {
        Some(n) => {
            let f = join(field, "devices");
            let seq = w.sequence(n, &f)?;
            let mut out = Vec::new();
            for (i, item) in seq.iter().enumerate() {
                if let Some(v) = w.scalar(item, &index(&f, i)) {
                    let v = v.to_string();
                    if let Some(problem) = text_problem(&v, Text::Line) {
                        w.error_at(item, &index(&f, i), problem);
                    }
                    out.push(v);
                }
            }
            Some(out)
        }
        None => None,
    };
    let device_env = match map.get_node("device_env") {
        Some(n) => {
            let f = join(field, "device_env");
            let name = w.string(n, &f)?;
            if !super::yaml::is_identifier(&name) || name.starts_with("TUNECTL_") {
                w.error_at(
                    n,
                    &f,
                    format!(
                        "`{name}` is not a usable environment variable name (TUNECTL_* is reserved)"
                    ),
                );
                return None;
            }
            Some(name)
        }
        None => None,
    };
    let slots = slots?;
    if let (Some(d), Some(n)) = (&devices, map.get_node("devices"))
        && d.len() != slots as usize
    {
        w.error_at(
            n,
            &join(field, "devices"),
            format!(
                "lists {} devices for {slots} slots; give one device per slot",
                d.len()
            ),
        );
    }
    let transport = match transport_name.as_str() {
        "local" => Transport::Local,
        "ssh" => Transport::Ssh(parse_ssh(w, map, field)?),
        _ => Transport::Slurm(parse_slurm(w, map, field)?),
    };
    Some(Host {
        name: name?,
        slots,
        labels,
        devices,
        device_env,
        transport,
    })
}

fn opt_string(
    w: &mut Walker,
    map: &MarkedMappingNode,
    field: &str,
    key: &str,
) -> Option<Option<String>> {
    match map.get_node(key) {
        Some(n) => w.string(n, &join(field, key)).map(Some),
        None => Some(None),
    }
}

/// How strictly an inventory string is checked (see [`checked`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Text {
    /// No control characters (newline, tab, NUL, ESC...): the string goes
    /// into a generated script or a command line.
    Line,
    /// Also no whitespace: one word of an `#SBATCH` line or an ssh option.
    Word,
    /// A word that also must not start with `-` (ssh would read it as an
    /// option): a host name or a user.
    Destination,
}

/// Why `text` is not acceptable as `kind`, if it is not.
fn text_problem(text: &str, kind: Text) -> Option<String> {
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Some(format!(
            "contains the control character U+{:04X}; it would break (or add) a line of a generated script or command",
            c as u32
        ));
    }
    if kind != Text::Line && text.chars().any(char::is_whitespace) {
        return Some(
            "contains whitespace; it is passed as one word (of an #SBATCH line or an ssh option) and would split"
                .to_string(),
        );
    }
    if kind == Text::Destination && text.starts_with('-') {
        return Some("starts with `-`, which ssh would read as an option".to_string());
    }
    None
}

/// The hosts of a `hosts_file` (at `node`; a relative path is taken from
/// the inventory's directory): one ssh destination (`[user@]host[:port]`)
/// a line, `#` comments and blank lines skipped; each with the tag that
/// names it (its host part) and its line. A problem in the file is named
/// by the file's own path and line, without quoting the line.
fn hosts_of_file(w: &mut Walker, node: &Node, field: &str) -> Option<Vec<(String, String, usize)>> {
    let given = w.string(node, field)?;
    let path = local_path(w, &given);
    let text = match read_small(&path) {
        Ok(t) => t,
        Err(e) => {
            w.error_at(node, field, format!("cannot read {}: {e}", path.display()));
            return None;
        }
    };
    let mut out = Vec::new();
    let mut bad = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        // The file may be anything the inventory names (a secret file by
        // mistake): its problems are said by line, never quoting it.
        let problem = text_problem(line, Text::Destination)
            .or_else(|| {
                destination_problem(line).map(|_| {
                    "a user or host starting with `-` would be read by ssh as an option".to_string()
                })
            })
            .or_else(|| {
                line.contains(char::is_whitespace)
                    .then(|| "one host a line (this one holds a space)".to_string())
            });
        // The host part names it: `user@gpu01.example.org:2222` is
        // `gpu01.example.org`.
        let rest = line.strip_prefix("ssh://").unwrap_or(line);
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let host = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        let tag = host.to_string();
        let problem = problem.or_else(|| {
            (!yaml::is_valid_name(&tag)).then(|| {
                "its host part cannot name a host (letters, digits, `-`, `_` and `.`; a line is \
                 `[user@]host[:port]`)"
                    .to_string()
            })
        });
        if let Some(p) = problem {
            w.diags.push(super::diag::Diagnostic {
                file: path.clone(),
                line: i + 1,
                column: 1,
                field: field.to_string(),
                message: p,
            });
            bad = true;
            continue;
        }
        out.push((line.to_string(), tag, i + 1));
    }
    if out.is_empty() && !bad {
        w.error_at(node, field, format!("{} lists no hosts", path.display()));
        return None;
    }
    (!bad).then_some(out)
}

/// A path on this machine named in the inventory: `~/` is this machine's
/// home, a relative path is taken from the inventory's directory.
fn local_path(w: &Walker, given: &str) -> PathBuf {
    let path = match given.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => PathBuf::from(given),
        },
        None => PathBuf::from(given),
    };
    if path.is_relative() {
        w.file().parent().map(|d| d.join(&path)).unwrap_or(path)
    } else {
        path
    }
}

/// The text of a regular file of at most [`MAX_HOSTS_FILE_BYTES`]: a FIFO
/// or `/dev/zero` named in an inventory must not hang the loader
/// ([`crate::safe_read`]).
fn read_small(path: &Path) -> Result<String, String> {
    crate::safe_read::read_text(path, MAX_HOSTS_FILE_BYTES).map_err(|e| e.to_string())
}

/// The `Host` aliases of an ssh client configuration (`config`, else
/// `~/.ssh/config`) that the ssh patterns of `ssh_config_hosts` (at
/// `node`, e.g. `gpu-* !gpu-old`) select, in the file's order. Only
/// concrete aliases count: a `Host` pattern (`*`, `?`) names no host.
fn hosts_of_ssh_config(
    w: &mut Walker,
    node: &Node,
    field: &str,
    config: Option<&Path>,
) -> Option<Vec<String>> {
    let select = w.string(node, field)?;
    let clauses: Vec<HostClause> = select
        .split_whitespace()
        .map(|p| match p.strip_prefix('!') {
            Some(rest) => HostClause::new(rest.to_string(), true),
            None => HostClause::new(p.to_string(), false),
        })
        .collect();
    if !clauses.iter().any(|c| !c.negated) {
        w.error_at(
            node,
            field,
            "name at least one ssh pattern to select (e.g. `gpu-*`)",
        );
        return None;
    }
    let path = match config {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".ssh/config"),
            None => {
                w.error_at(
                    node,
                    field,
                    "no HOME to find ~/.ssh/config in: name the file with `ssh_config`",
                );
                return None;
            }
        },
    };
    let parsed = read_small(&path).and_then(|text| {
        ssh2_config::SshConfig::default()
            .parse(
                &mut std::io::Cursor::new(text),
                ssh2_config::ParseRule::ALLOW_UNKNOWN_FIELDS
                    | ssh2_config::ParseRule::ALLOW_UNSUPPORTED_FIELDS,
            )
            .map_err(|e| e.to_string())
    });
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            w.error_at(
                node,
                field,
                format!("cannot read the ssh config {}: {e}", path.display()),
            );
            return None;
        }
    };
    // As ssh matches `Host` lines: a negated pattern that matches excludes.
    let selected = |alias: &str| {
        !clauses.iter().any(|c| c.negated && c.intersects(alias))
            && clauses.iter().any(|c| !c.negated && c.intersects(alias))
    };
    let mut out: Vec<String> = Vec::new();
    let mut bad = Vec::new();
    for host in parsed.get_hosts() {
        for clause in &host.pattern {
            let alias = &clause.pattern;
            if clause.negated
                || alias.contains(['*', '?'])
                || !selected(alias)
                || out.contains(alias)
            {
                continue;
            }
            if yaml::is_valid_name(alias) && destination_problem(alias).is_none() {
                out.push(alias.clone());
            } else {
                bad.push(alias.clone());
            }
        }
    }
    if let Some(alias) = bad.first() {
        w.error_at(
            node,
            field,
            format!(
                "the ssh config {} has the host `{alias}`, which cannot name a host (letters, digits, `-`, `_` and `.`)",
                path.display()
            ),
        );
        return None;
    }
    if out.is_empty() {
        let all: Vec<String> = parsed
            .get_hosts()
            .iter()
            .flat_map(|h| &h.pattern)
            .filter(|c| !c.negated && !c.pattern.contains(['*', '?']))
            .map(|c| c.pattern.clone())
            .collect();
        w.error_at(
            node,
            field,
            format!(
                "no `Host` of the ssh config {} matches `{select}` (its hosts: {})",
                path.display(),
                if all.is_empty() {
                    "none".to_string()
                } else {
                    all.join(", ")
                }
            ),
        );
        return None;
    }
    Some(out)
}

/// Record a problem when `value` (read from `map[key]`) is not acceptable
/// as `kind`.
fn checked(
    w: &mut Walker,
    map: &MarkedMappingNode,
    field: &str,
    key: &str,
    value: Option<&str>,
    kind: Text,
) {
    if let (Some(v), Some(n)) = (value, map.get_node(key))
        && let Some(problem) = text_problem(v, kind)
    {
        w.error_at(n, &join(field, key), problem);
    }
}

/// An ssh destination as the openssh crate reads it (`[ssh://][user@]host[:port]`):
/// why its user or host part would be read as an option, if it would.
fn destination_problem(dest: &str) -> Option<String> {
    let rest = dest.strip_prefix("ssh://").unwrap_or(dest);
    let (user, host) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    if user.is_some_and(|u| u.starts_with('-')) || host.starts_with('-') {
        return Some(format!(
            "`{dest}`: a user or host starting with `-` would be read by ssh as an option"
        ));
    }
    None
}

fn parse_ssh(w: &mut Walker, map: &MarkedMappingNode, field: &str) -> Option<SshHost> {
    // With `hosts_file`, the hosts come from that file (read by
    // `hosts_of_file`); `host` stays empty here.
    // With `hosts_file` or `ssh_config_hosts`, the hosts come from that
    // file (read by `hosts_of_file` or `hosts_of_ssh_config`); `host`
    // stays empty here.
    let sources: Vec<(&str, &Node)> = ["host", "hosts_file", "ssh_config_hosts"]
        .into_iter()
        .filter_map(|k| Some((k, map.get_node(k)?)))
        .collect();
    let host = match sources.as_slice() {
        [_, (second, n), ..] => {
            w.error_at(
                n,
                &join(field, second),
                "give one of `host`, `hosts_file` and `ssh_config_hosts`",
            );
            None
        }
        [("host", n)] => w.string(n, &join(field, "host")),
        [(key, n)] => w.string(n, &join(field, key)).map(|_| String::new()),
        [] => w
            .required(map, field, "host")
            .and_then(|n| w.string(n, &join(field, "host"))),
    };
    let ssh_config = match map.get_node("ssh_config") {
        Some(n) => {
            let f = join(field, "ssh_config");
            match w.string(n, &f) {
                Some(given) => {
                    let path = local_path(w, &given);
                    match read_small(&path) {
                        Ok(_) => Some(Some(path)),
                        Err(e) => {
                            w.error_at(n, &f, format!("cannot read {}: {e}", path.display()));
                            None
                        }
                    }
                }
                None => None,
            }
        }
        None => Some(None),
    };
    let port = match map.get_node("port") {
        Some(n) => {
            let f = join(field, "port");
            let v = w.int(n, &f)?;
            if !(1..=65535).contains(&v) {
                w.error_at(n, &f, format!("{v} is not a TCP port (1-65535)"));
                return None;
            }
            Some(v as u16)
        }
        None => None,
    };
    let user = opt_string(w, map, field, "user");
    let identity_file = opt_string(w, map, field, "identity_file");
    let known_hosts_file = opt_string(w, map, field, "known_hosts_file");
    let proxy_jump = opt_string(w, map, field, "proxy_jump");
    let workdir = opt_string(w, map, field, "workdir");
    let connect_timeout = match map.get_node("connect_timeout") {
        Some(n) => w.duration(n, &join(field, "connect_timeout")).map(Some),
        None => Some(None),
    };
    let strict = match map.get_node("strict_host_key_checking") {
        Some(n) => {
            let f = join(field, "strict_host_key_checking");
            // `yes`/`no` are booleans to a YAML reader; accept them as words.
            let text = match n.as_scalar() {
                Some(s) => s.as_str().to_string(),
                None => {
                    w.error_at(n, &f, "expected `yes` or `accept-new`");
                    return None;
                }
            };
            match text.as_str() {
                "yes" => Some(HostKeyChecking::Yes),
                "accept-new" => Some(HostKeyChecking::AcceptNew),
                other => {
                    w.error_at(
                        n,
                        &f,
                        format!("`{other}` is not allowed: host keys are always checked (use `yes` or `accept-new`)"),
                    );
                    None
                }
            }
        }
        None => Some(HostKeyChecking::Yes),
    };
    let max_sessions = match map.get_node("max_sessions") {
        Some(n) => w.u32_in(n, &join(field, "max_sessions"), 1, 1000),
        None => Some(8),
    };
    let agent = match map.get_node("agent") {
        Some(n) => w.bool(n, &join(field, "agent")),
        None => Some(true),
    };
    checked(w, map, field, "host", host.as_deref(), Text::Destination);
    if let (Some(h), Some(n)) = (host.as_deref(), map.get_node("host"))
        && text_problem(h, Text::Destination).is_none()
        && let Some(p) = destination_problem(h)
    {
        w.error_at(n, &join(field, "host"), p);
    }
    checked(
        w,
        map,
        field,
        "user",
        user.as_ref().and_then(|u| u.as_deref()),
        Text::Destination,
    );
    checked(
        w,
        map,
        field,
        "identity_file",
        identity_file.as_ref().and_then(|u| u.as_deref()),
        Text::Line,
    );
    checked(
        w,
        map,
        field,
        "known_hosts_file",
        known_hosts_file.as_ref().and_then(|u| u.as_deref()),
        Text::Word,
    );
    checked(
        w,
        map,
        field,
        "proxy_jump",
        proxy_jump.as_ref().and_then(|u| u.as_deref()),
        Text::Word,
    );
    if let (Some(Some(j)), Some(n)) = (proxy_jump.as_ref(), map.get_node("proxy_jump"))
        && let Some(p) = j.split(',').map(str::trim).find_map(destination_problem)
    {
        w.error_at(n, &join(field, "proxy_jump"), p);
    }
    checked(
        w,
        map,
        field,
        "workdir",
        workdir.as_ref().and_then(|u| u.as_deref()),
        Text::Line,
    );
    Some(SshHost {
        host: host?,
        port,
        user: user?,
        identity_file: identity_file?,
        known_hosts_file: known_hosts_file?,
        proxy_jump: proxy_jump?,
        connect_timeout: connect_timeout?,
        strict_host_key_checking: strict?,
        workdir: workdir?,
        max_sessions: max_sessions?,
        ssh_config: ssh_config?,
        agent: agent?,
    })
}

fn parse_slurm(w: &mut Walker, map: &MarkedMappingNode, field: &str) -> Option<SlurmHost> {
    let login = match map.get_node("login") {
        Some(n) => w.string(n, &join(field, "login")),
        None => Some("local".to_string()),
    };
    let partition = opt_string(w, map, field, "partition");
    let account = opt_string(w, map, field, "account");
    let qos = opt_string(w, map, field, "qos");
    let gres = opt_string(w, map, field, "gres");
    let constraint = opt_string(w, map, field, "constraint");
    let time_limit = opt_string(w, map, field, "time_limit");
    let shared_dir = opt_string(w, map, field, "shared_dir");
    let batch_template = opt_string(w, map, field, "batch_template");
    let sbatch_args = match map.get_node("sbatch_args") {
        Some(n) => w.string_list(n, &join(field, "sbatch_args")),
        None => Some(Vec::new()),
    };
    let max_jobs_in_flight = match map.get_node("max_jobs_in_flight") {
        Some(n) => w.u32_in(n, &join(field, "max_jobs_in_flight"), 1, 100_000),
        None => Some(100),
    };
    let array_throttle = match map.get_node("array_throttle") {
        Some(n) => w
            .u32_in(n, &join(field, "array_throttle"), 1, 100_000)
            .map(Some),
        None => Some(None),
    };
    let poll_interval = match map.get_node("poll_interval") {
        Some(n) => w.duration(n, &join(field, "poll_interval")),
        None => Some(Duration::from_secs(30)),
    };
    for (key, value) in [
        ("partition", &partition),
        ("account", &account),
        ("qos", &qos),
        ("gres", &gres),
        ("constraint", &constraint),
        ("time_limit", &time_limit),
        ("shared_dir", &shared_dir),
    ] {
        checked(
            w,
            map,
            field,
            key,
            value.as_ref().and_then(|v| v.as_deref()),
            Text::Word,
        );
    }
    checked(
        w,
        map,
        field,
        "batch_template",
        batch_template.as_ref().and_then(|v| v.as_deref()),
        Text::Line,
    );
    if let (Some(args), Some(Node::Sequence(items))) = (&sbatch_args, map.get_node("sbatch_args")) {
        let f = join(field, "sbatch_args");
        for (i, (arg, item)) in args.iter().zip(items.iter()).enumerate() {
            if let Some(problem) = text_problem(arg, Text::Line) {
                w.error_at(item, &index(&f, i), problem);
            }
        }
    }
    Some(SlurmHost {
        login: login?,
        partition: partition?,
        account: account?,
        qos: qos?,
        gres: gres?,
        constraint: constraint?,
        time_limit: time_limit?,
        sbatch_args: sbatch_args?,
        max_jobs_in_flight: max_jobs_in_flight?,
        array_throttle: array_throttle?,
        poll_interval: poll_interval?,
        shared_dir: shared_dir?,
        batch_template: batch_template?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_pattern_is_one_host_per_name_it_expands_to() {
        let text = "hosts:\n  - name: local\n    transport: local\n  - name: gpu\n    transport: ssh\n    host: admin@gpu[01-03].example.org\n    port: 2222\n    slots: 2\n";
        let inv = Inventory::from_text(Path::new("inv.yaml"), text).expect("loads");
        let names: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["local", "gpu-01", "gpu-02", "gpu-03"]);
        for (h, want) in inv.hosts[1..].iter().zip(["01", "02", "03"]) {
            let Transport::Ssh(s) = &h.transport else {
                panic!("{h:?}")
            };
            assert_eq!(s.host, format!("admin@gpu{want}.example.org"));
            // The entry's settings are every host's.
            assert_eq!((s.port, h.slots), (Some(2222), 2));
        }
    }

    #[test]
    fn a_hosts_file_names_one_host_a_line_and_its_problems_by_its_own_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("fleet.txt"),
            "# the A100 rack\ngpu01.example.org\n\ntuner@gpu02.example.org:2222  # spare\n",
        )
        .expect("write");
        let inv = dir.path().join("inv.yaml");
        let text =
            "hosts:\n  - name: rack\n    transport: ssh\n    hosts_file: fleet.txt\n    slots: 4\n";
        let loaded = Inventory::from_text(&inv, text).expect("loads");
        let got: Vec<(String, String)> = loaded
            .hosts
            .iter()
            .map(|h| match &h.transport {
                Transport::Ssh(s) => (h.name.clone(), s.host.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            [
                ("rack-gpu01.example.org".into(), "gpu01.example.org".into()),
                (
                    "rack-gpu02.example.org".into(),
                    "tuner@gpu02.example.org:2222".into()
                ),
            ]
        );
        assert!(loaded.hosts.iter().all(|h| h.slots == 4));

        std::fs::write(
            dir.path().join("fleet.txt"),
            "ok.example.org\n-oProxyCommand=x\n",
        )
        .expect("write");
        let e = Inventory::from_text(&inv, text)
            .expect_err("refused")
            .to_string();
        let at = format!(
            "{}:2:1: hosts[0].hosts_file:",
            dir.path().join("fleet.txt").display()
        );
        assert!(e.contains(&at) && e.contains("option"), "{e}");

        let e = Inventory::from_text(&inv, &text.replace("fleet.txt", "missing.txt"))
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("inv.yaml:4:") && e.contains("cannot read"),
            "{e}"
        );
        let both = text.replace("    slots: 4", "    host: a\n    slots: 4");
        let e = Inventory::from_text(&inv, &both)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("give one of `host`, `hosts_file`"), "{e}");
    }

    #[test]
    fn ssh_config_hosts_select_the_concrete_aliases_of_an_ssh_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("more.conf"),
            "Host gpu-c\n  HostName 10.0.0.3\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("ssh_config"),
            format!(
                "Include {}\n\
                 Host gpu-a gpu-b\n  HostName 10.0.0.1\n  SomeFutureOption yes\n\
                 Host gpu-*\n  User tuner\n\
                 Host gpu-old bastion\n  HostName 10.0.0.9\n",
                dir.path().join("more.conf").display()
            ),
        )
        .expect("write");
        let inv = dir.path().join("inv.yaml");
        let text = "hosts:\n  - name: lab\n    transport: ssh\n    ssh_config: ssh_config\n    ssh_config_hosts: \"gpu-* !gpu-old\"\n    slots: 2\n";
        let loaded = Inventory::from_text(&inv, text).expect("loads");
        let mut got: Vec<(String, String, Option<PathBuf>)> = loaded
            .hosts
            .iter()
            .map(|h| match &h.transport {
                Transport::Ssh(s) => (h.name.clone(), s.host.clone(), s.ssh_config.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        got.sort();
        let config = Some(dir.path().join("ssh_config"));
        assert_eq!(
            got,
            [
                ("lab-gpu-a".into(), "gpu-a".into(), config.clone()),
                ("lab-gpu-b".into(), "gpu-b".into(), config.clone()),
                ("lab-gpu-c".into(), "gpu-c".into(), config.clone()),
            ]
        );

        let e = Inventory::from_text(&inv, &text.replace("gpu-* !gpu-old", "cpu-*"))
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("inv.yaml:5:23: hosts[0].ssh_config_hosts: no `Host` of the ssh config")
                && e.contains("matches `cpu-*` (its hosts: gpu-c, gpu-a, gpu-b, gpu-old, bastion)"),
            "{e}"
        );
        let e = Inventory::from_text(
            &inv,
            &text.replace("ssh_config: ssh_config", "ssh_config: nope"),
        )
        .expect_err("refused")
        .to_string();
        assert!(
            e.contains("inv.yaml:4:17: hosts[0].ssh_config: cannot read"),
            "{e}"
        );
        let e = Inventory::from_text(
            &inv,
            &text.replace("    slots: 2", "    host: a\n    slots: 2"),
        )
        .expect_err("refused")
        .to_string();
        assert!(e.contains("give one of"), "{e}");
    }

    #[test]
    fn a_bad_pattern_and_a_name_it_takes_twice_are_named_with_their_place() {
        let text = "hosts:\n  - name: gpu\n    transport: ssh\n    host: gpu[9-1]\n";
        let e = Inventory::from_text(Path::new("inv.yaml"), text)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("inv.yaml:4:11: hosts[0].host: host pattern `[9-1]`")
                && e.contains("runs backwards"),
            "{e}"
        );
        let text = "hosts:\n  - name: gpu-2\n    transport: ssh\n    host: b\n  - name: gpu\n    transport: ssh\n    host: a[1-3]\n";
        let e = Inventory::from_text(Path::new("inv.yaml"), text)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("inv.yaml:5:")
                && e.contains("duplicate host name `gpu-2` (host `a2` of the pattern `a[1-3]`"),
            "{e}"
        );
    }
}
