//! cni-run: a small CNI runtime on the command line. It does with one network
//! configuration list what libcni does for a container runtime: runs each
//! plugin of the list with the list's `name` and `cniVersion` injected, chains
//! `prevResult` (ADD: the previous plugin's result; CHECK and DEL: the cached
//! ADD result), caches the ADD result where libcni does, hands each plugin the
//! capability arguments it declares as `runtimeConfig`, and passes CNI_ARGS on.
//! `scripts/cni` builds and runs it; the walk-throughs of docs/walkthroughs.md use it.

mod cache;
mod conf;
mod exec;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Map, Value};

use cache::Attachment;
use conf::{plugin_config, plugin_type, NetList};

const USAGE: &str = r#"usage: cni-run [OPTIONS] ADD|CHECK|DEL CONFLIST CONTAINER NETNS
       cni-run [OPTIONS] GC|STATUS CONFLIST

Runs the plugins of a network configuration list (a .conflist, or a single
plugin's .conf) as libcni does. ADD runs them in order, each one after the
first getting the previous one's result as prevResult, prints the last
result and caches it; CHECK runs them in order and DEL in reverse order, each
with the cached result as prevResult; DEL then removes the cached result.
GC and STATUS (cniVersion 1.1.0) run every plugin; GC's valid attachments
are those with a cached result for the network.

  CONFLIST   the network configuration list's file
  CONTAINER  the container ID (CNI_CONTAINERID)
  NETNS      the network namespace: a name as `ip netns add NAME` makes it
             (/var/run/netns/NAME) or a path (CNI_NETNS)

Options:
  --ifname NAME            CNI_IFNAME (default: $CNI_IFNAME, else eth0)
  --args 'K=V;K2=V2'       CNI_ARGS (default: $CNI_ARGS)
  --ips ADDR[,ADDR...]     the `ips` capability, e.g. --ips 10.22.1.5/16
  --ip-ranges JSON         the `ipRanges` capability, e.g. '[[{"subnet": "10.70.0.0/24"}]]'
  --capability-args JSON   capability arguments as an object, e.g. '{"mac": "c2:11:22:33:44:55"}'
  -h, --help               this text

A plugin gets as runtimeConfig only the capabilities it declares in the list
("capabilities": {"ips": true}) and that were given. CHECK and DEL use the
CNI_ARGS and capability arguments of the ADD (kept in its cache file) unless
given others.

Environment:
  CNI_PATH        where plugins are found (default /opt/cni/bin:/usr/lib/cni)
  CNI_CACHE_DIR   the cache directory (default /var/lib/cni); the ADD result
                  is kept in results/<network>-<container>-<ifname> there

Exit status: 0 on success; 1 when a plugin fails (its error object is printed
on stdout) or the runtime cannot go on; 2 for a usage error.
"#;

const DEFAULT_CNI_PATH: &str = "/opt/cni/bin:/usr/lib/cni";
const NETNS_DIR: &str = "/var/run/netns";

/// Why a run did not succeed.
#[derive(Debug)]
enum Failure {
    Usage(String),
    Runtime(String),
    Plugin(Box<PluginFailure>),
}

/// A plugin failed: how, and its error object if it printed one.
#[derive(Debug)]
struct PluginFailure {
    what: String,
    how: String,
    error: Option<Value>,
    stdout: Vec<u8>,
}

fn runtime<E: std::fmt::Display>(context: &str) -> impl FnOnce(E) -> Failure + '_ {
    move |e| Failure::Runtime(format!("{context}: {e}"))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Verb {
    Add,
    Check,
    Del,
    Gc,
    Status,
}

impl Verb {
    fn parse(s: &str) -> Option<Verb> {
        Some(match s.to_ascii_uppercase().as_str() {
            "ADD" => Verb::Add,
            "CHECK" => Verb::Check,
            "DEL" => Verb::Del,
            "GC" => Verb::Gc,
            "STATUS" => Verb::Status,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Verb::Add => "ADD",
            Verb::Check => "CHECK",
            Verb::Del => "DEL",
            Verb::Gc => "GC",
            Verb::Status => "STATUS",
        }
    }
}

/// The command line, parsed.
#[derive(Debug, Default)]
struct Options {
    positional: Vec<String>,
    ifname: Option<String>,
    cni_args: Option<String>,
    /// None unless a capability option was given.
    capability_args: Option<Map<String, Value>>,
    help: bool,
}

impl Options {
    fn parse(args: Vec<OsString>) -> Result<Options, Failure> {
        let mut args = args
            .into_iter()
            .map(|a| a.into_string().map_err(|a| Failure::Usage(format!("argument {a:?} is not UTF-8"))))
            .collect::<Result<Vec<String>, Failure>>()?
            .into_iter();
        let mut o = Options::default();
        while let Some(arg) = args.next() {
            if arg == "-h" || arg == "--help" {
                o.help = true;
                continue;
            }
            if arg == "--" {
                o.positional.extend(args.by_ref());
                break;
            }
            let Some(option) = arg.strip_prefix("--") else {
                o.positional.push(arg);
                continue;
            };
            let (name, value) = match option.split_once('=') {
                Some((name, value)) => (name.to_string(), value.to_string()),
                None => {
                    let value = args.next().ok_or_else(|| Failure::Usage(format!("--{option} needs a value")))?;
                    (option.to_string(), value)
                }
            };
            let json = |what: &str| {
                serde_json::from_str::<Value>(&value).map_err(|e| Failure::Usage(format!("--{name}: {what}: {e}")))
            };
            match name.as_str() {
                "ifname" => o.ifname = Some(value),
                "args" => o.cni_args = Some(value),
                "ips" => {
                    let caps = o.capability_args.get_or_insert_with(Map::new);
                    let ips = caps.entry("ips").or_insert_with(|| json!([]));
                    if let Value::Array(list) = ips {
                        list.extend(value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| json!(s)));
                    }
                }
                "ip-ranges" => match json("not JSON")? {
                    ranges @ Value::Array(_) => {
                        o.capability_args.get_or_insert_with(Map::new).insert("ipRanges".into(), ranges);
                    }
                    _ => return Err(Failure::Usage("--ip-ranges: not an array of range sets".into())),
                },
                "capability-args" => match json("not JSON")? {
                    Value::Object(given) => o.capability_args.get_or_insert_with(Map::new).extend(given),
                    _ => return Err(Failure::Usage("--capability-args: not a JSON object".into())),
                },
                _ => return Err(Failure::Usage(format!("unknown option --{name}"))),
            }
        }
        Ok(o)
    }
}

/// Where plugins and the cache are.
struct Runtime {
    cni_path: String,
    cache_dir: PathBuf,
}

/// What CNI_* a plugin gets for one attachment.
struct AttachmentEnv<'a> {
    at: &'a Attachment,
    cni_args: &'a str,
}

impl Runtime {
    /// Runs one plugin of `list` with `command` and `config` on stdin;
    /// returns its stdout.
    fn invoke(
        &self,
        verb: Verb,
        plugin: &Map<String, Value>,
        config: &Value,
        env: Option<&AttachmentEnv>,
    ) -> Result<Vec<u8>, Failure> {
        let name = plugin_type(plugin);
        let exe = exec::find(name, &self.cni_path).map_err(Failure::Runtime)?;
        let mut set = vec![("CNI_COMMAND", verb.name()), ("CNI_PATH", self.cni_path.as_str())];
        let mut unset: Vec<&str> = Vec::new();
        match env {
            Some(e) => set.extend([
                ("CNI_CONTAINERID", e.at.container_id.as_str()),
                ("CNI_NETNS", e.at.netns.as_str()),
                ("CNI_IFNAME", e.at.ifname.as_str()),
                ("CNI_ARGS", e.cni_args),
            ]),
            None => unset.extend(["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS"]),
        }
        exec::run(&exe, &set, &unset, config.to_string().as_bytes()).map_err(|f| {
            let error = serde_json::from_slice::<Value>(&f.stdout).ok().filter(|v| v.get("code").is_some());
            let what = format!("plugin {name} ({})", verb.name());
            Failure::Plugin(Box::new(PluginFailure { what, how: f.how, error, stdout: f.stdout }))
        })
    }

    /// ADD: every plugin in order, each after the first with the previous
    /// one's result as prevResult; the last result is cached and returned.
    fn add(&self, list: &NetList, env: &AttachmentEnv, capability_args: &Map<String, Value>) -> Result<Value, Failure> {
        let mut prev: Option<Value> = None;
        for plugin in &list.plugins {
            let config = plugin_config(list, plugin, prev.as_ref(), capability_args);
            let out = self.invoke(Verb::Add, plugin, &config, Some(env))?;
            let result = serde_json::from_slice::<Value>(&out).ok().filter(Value::is_object).ok_or_else(|| {
                let printed = String::from_utf8_lossy(&out);
                Failure::Runtime(format!(
                    "plugin {} (ADD) succeeded but printed no result: {printed:?}",
                    plugin_type(plugin)
                ))
            })?;
            prev = Some(result);
        }
        let result = prev.ok_or_else(|| Failure::Runtime("the list has no plugins".into()))?;
        let pairs = conf::parse_cni_args(env.cni_args).map_err(Failure::Runtime)?;
        cache::write(&self.cache_dir, env.at, &list.bytes, &pairs, capability_args, &result)
            .map_err(|e| Failure::Runtime(format!("caching the result: {e}")))?;
        Ok(result)
    }

    /// CHECK: every plugin in order with the cached result as prevResult.
    fn check(
        &self,
        list: &NetList,
        env: &AttachmentEnv,
        capability_args: &Map<String, Value>,
        cached: Option<&Value>,
    ) -> Result<(), Failure> {
        if !list.at_least("0.4.0") {
            let v = &list.cni_version;
            return Err(Failure::Runtime(format!("configuration version {v:?} does not support the CHECK command")));
        }
        if list.disable_check {
            eprintln!("cni-run: the list says disableCheck: nothing to check");
            return Ok(());
        }
        for plugin in &list.plugins {
            self.invoke(Verb::Check, plugin, &plugin_config(list, plugin, cached, capability_args), Some(env))?;
        }
        Ok(())
    }

    /// DEL: every plugin in reverse order with the cached result as
    /// prevResult (from 0.4.0 on); then the cached result is removed.
    fn del(
        &self,
        list: &NetList,
        env: &AttachmentEnv,
        capability_args: &Map<String, Value>,
        cached: Option<&Value>,
    ) -> Result<(), Failure> {
        let prev = cached.filter(|_| list.at_least("0.4.0"));
        for plugin in list.plugins.iter().rev() {
            self.invoke(Verb::Del, plugin, &plugin_config(list, plugin, prev, capability_args), Some(env))?;
        }
        cache::remove(&self.cache_dir, env.at).map_err(Failure::Runtime)
    }

    /// GC or STATUS: every plugin in order, no attachment; GC's valid
    /// attachments are those with a cached result for the network.
    fn network_wide(&self, verb: Verb, list: &NetList) -> Result<(), Failure> {
        if !list.at_least("1.1.0") {
            let v = &list.cni_version;
            return Err(Failure::Runtime(format!(
                "{} needs cniVersion 1.1.0 or later; the list has {v:?}",
                verb.name()
            )));
        }
        let valid: Vec<Value> = cache::attachments(&self.cache_dir, &list.name)
            .into_iter()
            .map(|(id, ifname)| json!({"containerID": id, "ifname": ifname}))
            .collect();
        for plugin in &list.plugins {
            let mut config = plugin_config(list, plugin, None, &Map::new());
            if verb == Verb::Gc {
                config["cni.dev/valid-attachments"] = Value::Array(valid.clone());
            }
            self.invoke(verb, plugin, &config, None)?;
        }
        Ok(())
    }
}

/// An environment variable's value; None when unset or empty.
fn env_text(key: &str) -> Result<Option<String>, Failure> {
    match std::env::var_os(key).map(OsString::into_string) {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v).filter(|v| !v.is_empty())),
        Some(Err(_)) => Err(Failure::Runtime(format!("${key} is not UTF-8"))),
    }
}

/// NETNS as a path: a name is one of `ip netns`'.
fn netns_path(netns: &str) -> String {
    if netns.contains('/') {
        netns.to_string()
    } else {
        format!("{NETNS_DIR}/{netns}")
    }
}

/// Runs the command line; Ok(Some(result)) for ADD.
fn cli(args: Vec<OsString>) -> Result<Option<Value>, Failure> {
    let o = Options::parse(args)?;
    if o.help {
        print!("{USAGE}");
        return Ok(None);
    }
    let (verb, rest) = match o.positional.split_first() {
        Some((word, rest)) => {
            (Verb::parse(word).ok_or_else(|| Failure::Usage(format!("unknown command {word:?}")))?, rest)
        }
        None => return Err(Failure::Usage("no command".into())),
    };
    let wanted = if matches!(verb, Verb::Gc | Verb::Status) { 1 } else { 3 };
    if rest.len() != wanted {
        return Err(Failure::Usage(format!("{} takes {wanted} argument(s), not {}", verb.name(), rest.len())));
    }
    let file = Path::new(&rest[0]);
    let bytes = std::fs::read(file).map_err(runtime(&rest[0]))?;
    let list = NetList::parse(&bytes).map_err(runtime(&rest[0]))?;
    let rt = Runtime {
        cni_path: env_text("CNI_PATH")?.unwrap_or_else(|| DEFAULT_CNI_PATH.to_string()),
        cache_dir: env_text("CNI_CACHE_DIR")?.map_or_else(|| PathBuf::from(cache::DEFAULT_DIR), PathBuf::from),
    };
    if matches!(verb, Verb::Gc | Verb::Status) {
        return rt.network_wide(verb, &list).map(|()| None);
    }

    let (container_id, netns) = (&rest[1], &rest[2]);
    let ifname = match o.ifname {
        Some(name) => name,
        None => env_text("CNI_IFNAME")?.unwrap_or_else(|| "eth0".to_string()),
    };
    if !conf::valid_id(container_id) {
        return Err(Failure::Usage(format!("container ID {container_id:?}: letters, digits, _ . - only")));
    }
    if !conf::valid_id(&list.name) {
        return Err(Failure::Runtime(format!("network name {:?}: letters, digits, _ . - only", list.name)));
    }
    if !conf::valid_ifname(&ifname) {
        return Err(Failure::Usage(format!("interface name {ifname:?} is not valid")));
    }
    let at =
        Attachment { network: list.name.clone(), container_id: container_id.clone(), ifname, netns: netns_path(netns) };
    if matches!(verb, Verb::Add | Verb::Check) && !Path::new(&at.netns).exists() {
        let hint = if netns.contains('/') { String::new() } else { format!(" (create it: ip netns add {netns})") };
        return Err(Failure::Runtime(format!("no network namespace {}{hint}", at.netns)));
    }

    // CHECK and DEL: the ADD's cached result, CNI_ARGS and capability arguments.
    let cached = match verb {
        Verb::Add => None,
        _ => cache::read(&rt.cache_dir, &at).map_err(Failure::Runtime)?,
    };
    if verb != Verb::Add && cached.is_none() {
        let file = cache::path(&rt.cache_dir, &at);
        eprintln!("cni-run: no cached ADD result ({}): the plugins get no prevResult", file.display());
    }
    let cached = cached.unwrap_or_default();
    let given_args = match o.cni_args {
        Some(args) => Some(args),
        None => env_text("CNI_ARGS")?,
    };
    let cni_args = given_args
        .or_else(|| {
            cached.cni_args.map(|pairs| pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";"))
        })
        .unwrap_or_default();
    conf::parse_cni_args(&cni_args).map_err(Failure::Usage)?;
    let capability_args = o.capability_args.or(cached.capability_args).unwrap_or_default();
    let env = AttachmentEnv { at: &at, cni_args: &cni_args };

    match verb {
        Verb::Add => rt.add(&list, &env, &capability_args).map(Some),
        Verb::Check => rt.check(&list, &env, &capability_args, cached.result.as_ref()).map(|()| None),
        _ => rt.del(&list, &env, &capability_args, cached.result.as_ref()).map(|()| None),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn main() -> ExitCode {
    match cli(std::env::args_os().skip(1).collect()) {
        Ok(Some(result)) => {
            println!("{}", pretty(&result));
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            let synopsis: Vec<&str> = USAGE.lines().take(2).collect();
            eprintln!("cni-run: {msg}\n{}\n(--help says more)", synopsis.join("\n"));
            ExitCode::from(2)
        }
        Err(Failure::Runtime(msg)) => {
            eprintln!("cni-run: {msg}");
            ExitCode::FAILURE
        }
        Err(Failure::Plugin(failed)) => {
            let PluginFailure { what, how, error, stdout } = *failed;
            match error {
                Some(error) => {
                    println!("{}", pretty(&error));
                    let msg = error.get("msg").and_then(Value::as_str).unwrap_or("(no msg)");
                    eprintln!("cni-run: {what} failed ({how}): {msg}");
                }
                None => {
                    let printed = String::from_utf8_lossy(&stdout);
                    eprintln!("cni-run: {what} failed ({how}) with no error object on stdout; it printed {printed:?}");
                }
            }
            if what.ends_with("(ADD)") {
                eprintln!(
                    "cni-run: DEL with the same arguments undoes what the plugins of the list did before failing"
                );
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// A directory of fake plugins that record their stdin and CNI_* in
    /// `<dir>/<n>.<name>.<COMMAND>` and `calls`; on ADD each prints a result
    /// naming itself and the prevResult it got.
    struct Fakes {
        dir: tempfile::TempDir,
        cache: tempfile::TempDir,
    }

    impl Fakes {
        fn new(names: &[&str]) -> Fakes {
            let dir = tempfile::tempdir().expect("tempdir");
            for name in names {
                let script = format!(
                    r#"#!/bin/sh
d='{dir}'
n=$(cat "$d/calls" 2>/dev/null | wc -l)
n=$((n + 0))
echo "{name} $CNI_COMMAND" >> "$d/calls"
cat > "$d/$n.stdin"
env | grep '^CNI_' | sort > "$d/$n.env"
[ '{name}' != fail ] || {{ printf '{{"cniVersion": "1.0.0", "code": 11, "msg": "try again", "details": ""}}'; exit 1; }}
case "$CNI_COMMAND" in
  ADD) printf '{{"cniVersion": "1.0.0", "ips": [], "by": "{name}", "after": %s}}' "$(grep -c prevResult "$d/$n.stdin")" ;;
esac
"#,
                    dir = dir.path().display()
                );
                let path = dir.path().join(name);
                fs::write(&path, script).expect("write");
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
            }
            Fakes { dir, cache: tempfile::tempdir().expect("tempdir") }
        }

        fn runtime(&self) -> Runtime {
            Runtime { cni_path: self.dir.path().display().to_string(), cache_dir: self.cache.path().to_path_buf() }
        }

        fn calls(&self) -> Vec<String> {
            let log = fs::read_to_string(self.dir.path().join("calls")).unwrap_or_default();
            log.lines().map(str::to_string).collect()
        }

        fn stdin(&self, call: usize) -> Value {
            let bytes = fs::read(self.dir.path().join(format!("{call}.stdin"))).expect("recorded stdin");
            serde_json::from_slice(&bytes).expect("JSON stdin")
        }

        fn env(&self, call: usize) -> String {
            fs::read_to_string(self.dir.path().join(format!("{call}.env"))).expect("recorded env")
        }
    }

    fn list(plugins: Value) -> NetList {
        let text = json!({"cniVersion": "1.0.0", "name": "net", "plugins": plugins}).to_string();
        NetList::parse(text.as_bytes()).expect("list")
    }

    fn attachment() -> Attachment {
        Attachment { network: "net".into(), container_id: "c1".into(), ifname: "eth1".into(), netns: "/x/ns".into() }
    }

    #[test]
    fn add_chains_prev_result_check_and_del_get_the_cached_one() {
        let fakes = Fakes::new(&["a", "b"]);
        let rt = fakes.runtime();
        let l = list(json!([{"type": "a", "capabilities": {"ips": true}}, {"type": "b"}]));
        let at = attachment();
        let env = AttachmentEnv { at: &at, cni_args: "IgnoreUnknown=1;IP=10.0.0.7" };
        let caps = json!({"ips": ["10.0.0.7/24"]}).as_object().cloned().unwrap_or_default();

        let result = rt.add(&l, &env, &caps).expect("ADD");
        assert_eq!(result, json!({"cniVersion": "1.0.0", "ips": [], "by": "b", "after": 1}));
        assert!(fakes.stdin(0).get("prevResult").is_none(), "the first plugin gets no prevResult");
        assert_eq!(fakes.stdin(0)["runtimeConfig"], json!({"ips": ["10.0.0.7/24"]}));
        assert_eq!(fakes.stdin(1)["prevResult"]["by"], "a", "the second plugin gets the first one's result");
        assert!(fakes.stdin(1).get("runtimeConfig").is_none(), "b declares no capability");
        assert_eq!(fakes.stdin(1)["name"], "net");
        let env0 = fakes.env(0);
        for line in ["CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/x/ns", "CNI_IFNAME=eth1"] {
            assert!(env0.lines().any(|l| l == line), "{line} in {env0}");
        }
        assert!(env0.contains("CNI_ARGS=IgnoreUnknown=1;IP=10.0.0.7\n"), "{env0}");

        let cached = cache::read(&rt.cache_dir, &at).expect("readable").expect("cached");
        assert_eq!(cached.result.as_ref(), Some(&result));
        assert_eq!(cached.capability_args.as_ref(), Some(&caps));

        rt.check(&l, &env, &caps, cached.result.as_ref()).expect("CHECK");
        rt.del(&l, &env, &caps, cached.result.as_ref()).expect("DEL");
        assert_eq!(fakes.calls(), ["a ADD", "b ADD", "a CHECK", "b CHECK", "b DEL", "a DEL"]);
        for call in 2..6 {
            assert_eq!(fakes.stdin(call)["prevResult"], result, "call {call} gets the cached result");
        }
        assert!(!cache::path(&rt.cache_dir, &at).exists(), "DEL removes the cached result");
    }

    #[test]
    fn a_failing_plugin_stops_add_and_its_error_object_is_kept() {
        let fakes = Fakes::new(&["a", "fail", "b"]);
        let rt = fakes.runtime();
        let l = list(json!([{"type": "a"}, {"type": "fail"}, {"type": "b"}]));
        let at = attachment();
        let env = AttachmentEnv { at: &at, cni_args: "" };
        match rt.add(&l, &env, &Map::new()) {
            Err(Failure::Plugin(failed)) => {
                let (what, error) = (failed.what, failed.error.unwrap_or_default());
                assert_eq!(what, "plugin fail (ADD)");
                assert_eq!(error["code"], 11);
            }
            other => panic!("expected the plugin's error: {other:?}"),
        }
        assert_eq!(fakes.calls(), ["a ADD", "fail ADD"]);
        assert!(!cache::path(&rt.cache_dir, &at).exists(), "nothing cached after a failed ADD");
    }

    #[test]
    fn check_needs_0_4_0_and_gc_gets_the_cached_attachments() {
        let fakes = Fakes::new(&["a"]);
        let rt = fakes.runtime();
        let old = NetList::parse(br#"{"cniVersion": "0.3.1", "name": "net", "type": "a"}"#).expect("conf");
        let at = attachment();
        let env = AttachmentEnv { at: &at, cni_args: "" };
        assert!(matches!(rt.check(&old, &env, &Map::new(), None), Err(Failure::Runtime(m)) if m.contains("CHECK")));
        assert!(matches!(rt.network_wide(Verb::Gc, &old), Err(Failure::Runtime(m)) if m.contains("1.1.0")));

        let new =
            NetList::parse(br#"{"cniVersion": "1.1.0", "name": "net", "plugins": [{"type": "a"}]}"#).expect("list");
        rt.add(&new, &env, &Map::new()).expect("ADD");
        rt.network_wide(Verb::Gc, &new).expect("GC");
        rt.network_wide(Verb::Status, &new).expect("STATUS");
        assert_eq!(fakes.calls(), ["a ADD", "a GC", "a STATUS"]);
        assert_eq!(fakes.stdin(1)["cni.dev/valid-attachments"], json!([{"containerID": "c1", "ifname": "eth1"}]));
        assert!(!fakes.env(1).contains("CNI_CONTAINERID"), "GC is not about one attachment");
        assert!(fakes.stdin(2).get("cni.dev/valid-attachments").is_none());
    }

    #[test]
    fn options() {
        let parse = |args: &[&str]| Options::parse(args.iter().map(OsString::from).collect());
        let o = parse(&["ADD", "--ips", "10.22.1.5/16,10.22.1.6/16", "f", "--ifname=eth1", "c", "ns"]).expect("ok");
        assert_eq!(o.positional, ["ADD", "f", "c", "ns"]);
        assert_eq!(o.ifname.as_deref(), Some("eth1"));
        assert_eq!(o.capability_args, json!({"ips": ["10.22.1.5/16", "10.22.1.6/16"]}).as_object().cloned());
        let o = parse(&["--ip-ranges", r#"[[{"subnet": "10.70.0.0/24"}]]"#, "--capability-args", r#"{"mac": "m"}"#])
            .expect("ok");
        assert_eq!(
            o.capability_args,
            json!({"ipRanges": [[{"subnet": "10.70.0.0/24"}]], "mac": "m"}).as_object().cloned()
        );
        assert!(parse(&["--args", "A=1"]).expect("ok").capability_args.is_none());
        for bad in [&["--ips"][..], &["--ip-ranges", "{}"], &["--capability-args", "[]"], &["--colour", "x"]] {
            assert!(matches!(parse(bad), Err(Failure::Usage(_))), "{bad:?}");
        }
        assert_eq!(netns_path("blue"), "/var/run/netns/blue");
        assert_eq!(netns_path("/proc/1/ns/net"), "/proc/1/ns/net");
    }
}
