//! The frame every executable runs in: read the environment and stdin, answer
//! VERSION, dispatch the command to a [`Plugin`], print exactly one JSON answer
//! on stdout, and turn every failure, panics included, into a CNI error object.

use std::cell::Cell;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::Mutex;

use crate::args::Attachment;
use crate::config::{read_bounded, NetConf};
use crate::env::{Command, Env};
use crate::error::{CniError, Code, Result};
use crate::logging::{self, LogSettings};
use crate::result::IpamResult;
use crate::store;
use crate::version::{self, SpecVersion};

/// Who the executable is, for the about text and the logs.
pub struct About {
    pub name: &'static str,
    pub version: &'static str,
    pub summary: &'static str,
}

/// One of the suite's plugins: who it is and its verbs. The suite's
/// executables are one multicall program that runs the one named by the
/// file it was started as; ipam-delegated also runs one inside its own
/// process when the delegate it finds in CNI_PATH is that very program
/// (ipam-delegated's `delegate::in_process`).
pub struct Builtin {
    pub about: About,
    pub plugin: &'static (dyn Plugin + Sync),
}

/// One invocation: the validated environment and the configuration.
pub struct Request {
    pub env: Env,
    pub config: NetConf,
}

impl Request {
    /// The attachment ADD, DEL and CHECK act on, scoped by the network name.
    pub fn attachment(&self) -> Result<Attachment> {
        Ok(self.env.attachment(self.config.name()?))
    }
}

/// What a command prints on success. (Made once per process, so its size does not matter.)
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    Result(IpamResult),
    Nothing,
}

/// The CNI verbs. VERSION is answered by the frame.
pub trait Plugin {
    fn add(&self, req: &Request) -> Result<Reply>;
    fn del(&self, req: &Request) -> Result<Reply>;
    fn check(&self, req: &Request) -> Result<Reply>;
    fn gc(&self, req: &Request) -> Result<Reply>;
    fn status(&self, req: &Request) -> Result<Reply>;
}

/// The whole life of a plugin process; `main` returns this.
pub fn run(builtin: &Builtin) -> ExitCode {
    let about = &builtin.about;
    install_panic_hook();
    let env = match Env::from_process() {
        Ok(None) => {
            eprintln!("{}", about_text(about));
            return ExitCode::SUCCESS;
        }
        Ok(Some(env)) => Ok(env),
        Err(e) => Err(e),
    };
    let stdin = read_bounded(std::io::stdin().lock(), "stdin");
    let (answer, success) = respond(builtin, env, Stdin::Bytes(stdin));
    let mut out = std::io::stdout().lock();
    if let Some(json) = answer {
        // Nothing useful can be done if the caller closed our stdout.
        let _ = writeln!(out, "{json}").and_then(|()| out.flush());
    }
    if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What a plugin reads on stdin.
pub enum Stdin {
    /// What a process read (or why it could not).
    Bytes(Result<Vec<u8>>),
    /// For a delegate ipam-delegated runs in its own process: the JSON value
    /// of its input, which the bytes of its process would parse to (no
    /// larger than a process may read: the caller checks).
    Value(serde_json::Value),
}

/// The answer (stdout's content) and whether it is a success: all of a
/// plugin run but the process around it, so that ipam-delegated can run
/// its delegates in its own process, and tests the frame without one.
pub fn respond(builtin: &Builtin, env: Result<Env>, stdin: Stdin) -> (Option<serde_json::Value>, bool) {
    let (about, plugin) = (&builtin.about, builtin.plugin);
    let _running = Running::start(about.name);
    // Parsed once, before anything else: the configuration also says where to
    // log, and logging must be up to report even the earliest error. The
    // bytes stay for the versions of VERSION and of an error object when the
    // configuration does not parse.
    let (config, stdin) = match stdin {
        Stdin::Bytes(bytes) => (bytes.as_deref().map_err(Clone::clone).and_then(NetConf::parse), bytes),
        Stdin::Value(value) if NetConf::version_of(&value).is_ok() => (NetConf::from_value(value), Ok(Vec::new())),
        // Not a configuration (ipam-delegated hands over none such): read
        // as its text would be.
        Stdin::Value(value) => {
            let text = value.to_string().into_bytes();
            (NetConf::parse(&text), Ok(text))
        }
    };
    let parsed_version = config.as_ref().ok().map(|c| c.version);
    let settings = match &config {
        Ok(c) if c.raw.get("ipam").is_some() => c.ipam().map(|ipam| LogSettings::from_ipam(about.name, Some(ipam))),
        _ => Ok(LogSettings::build_default(about.name)),
    };
    let _logging = match &settings {
        Ok(s) => logging::activate(about.name, s),
        Err(_) => logging::activate(about.name, &LogSettings::build_default(about.name)),
    };
    // A root span, also inside ipam-delegated: a delegate's log lines read
    // the same whether it runs in a process of its own or not.
    let span = match &env {
        Ok(env) => tracing::error_span!(
            parent: None,
            "cni",
            plugin = about.name,
            command = env.command.as_str(),
            container = env.container_id.as_deref().unwrap_or("-"),
            ifname = env.ifname.as_deref().unwrap_or("-")
        ),
        Err(_) => tracing::error_span!(parent: None, "cni", plugin = about.name),
    };
    let _entered = span.enter();
    tracing::debug!("{} {} starting", about.name, about.version);
    // Once per call: by the orchestrator, not again by each of its delegates.
    let top_level = env.as_ref().map_or(true, |env| env.stack.depth == 0);
    if let (Ok(config), true) = (&config, top_level) {
        for warning in config.ipam_key_warnings().into_iter().chain(crate::sticky::unused_warning(config)) {
            tracing::warn!("{warning}");
        }
    }

    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        let env = env?;
        if env.command == Command::Version {
            // Read off the configuration, or off the bytes when it did not parse.
            let unparsed: Option<serde_json::Value> = match &config {
                Ok(_) => None,
                Err(_) => stdin.as_deref().ok().and_then(|b| serde_json::from_slice(b).ok()),
            };
            let parsed = config.as_ref().ok().map(|c| &c.raw).or(unparsed.as_ref());
            let requested = parsed.and_then(|v| v.get("cniVersion")).and_then(|v| v.as_str());
            return Ok(Some(version::version_answer(requested)));
        }
        settings?;
        dispatch(plugin, env, config?)
    }))
    .unwrap_or_else(|_| Err(panic_error()));
    match outcome {
        Ok(answer) => (answer, true),
        Err(e) => {
            tracing::error!("{e}");
            // The configuration's own version; read again from the bytes only
            // when it did not parse (perhaps because the version is unknown).
            let version = match (parsed_version, stdin.as_deref()) {
                (Some(v), _) => v.as_str().to_string(),
                (None, Ok(bytes)) => NetConf::error_version(bytes),
                (None, Err(_)) => SpecVersion::LATEST.to_string(),
            };
            (Some(e.to_json(&version)), false)
        }
    }
}

fn dispatch(plugin: &dyn Plugin, env: Env, config: NetConf) -> Result<Option<serde_json::Value>> {
    let minimum = match env.command {
        Command::Check => SpecVersion::V0_4_0,
        Command::Gc | Command::Status => SpecVersion::V1_1_0,
        _ => SpecVersion::V0_1_0,
    };
    if config.version < minimum {
        return Err(CniError::new(
            Code::IncompatibleVersion,
            format!(
                "cniVersion {} does not allow {}; it needs {minimum} or later",
                config.version,
                env.command.as_str()
            ),
        ));
    }
    let version = config.version;
    let req = Request { env, config };
    // One call: what it commits is made durable once, before it answers
    // (and a delegate run inside ipam-delegated is part of its call).
    let reply = store::share_within_call(|| match req.env.command {
        Command::Add => plugin.add(&req),
        Command::Del => plugin.del(&req),
        Command::Check => plugin.check(&req),
        Command::Gc => plugin.gc(&req),
        Command::Status => plugin.status(&req),
        Command::Version => unreachable!("answered above"),
    })?;
    Ok(match reply {
        Reply::Result(result) => Some(result.to_json(version)),
        Reply::Nothing => None,
    })
}

/// Name, version and spec versions, for a person who runs the executable by hand.
pub fn about_text(about: &About) -> String {
    format!(
        "{} {}: {}\nCNI protocol versions supported: {}\nThis is a CNI plugin: it is run by a container runtime with CNI_COMMAND set.",
        about.name,
        about.version,
        about.summary,
        version::supported_list()
    )
}

static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

thread_local! {
    /// The plugin this thread runs, which the panic hook names.
    static RUNNING: Cell<&'static str> = const { Cell::new("ipam-delegated") };
}

/// Names the plugin a panic is reported for, until dropped: a delegate that
/// ipam-delegated runs in its process is reported under its own name.
struct Running(&'static str);

impl Running {
    fn start(name: &'static str) -> Running {
        Running(RUNNING.replace(name))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.set(self.0);
    }
}

fn install_panic_hook() {
    panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        eprintln!("{}: bug: {message}", RUNNING.get());
        if let Ok(mut slot) = PANIC_MESSAGE.lock() {
            *slot = Some(message);
        }
    }));
}

fn panic_error() -> CniError {
    let message = PANIC_MESSAGE.lock().ok().and_then(|mut m| m.take()).unwrap_or_else(|| "unknown panic".into());
    CniError::new(Code::Internal, "internal error (a bug in the plugin; please report it)").with_details(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo;
    impl Plugin for Echo {
        fn add(&self, req: &Request) -> Result<Reply> {
            Ok(Reply::Result(req.config.prev_result()?.unwrap_or_default()))
        }
        fn del(&self, _: &Request) -> Result<Reply> {
            Ok(Reply::Nothing)
        }
        fn check(&self, _: &Request) -> Result<Reply> {
            Err(CniError::new(Code::NotRecorded, "not recorded"))
        }
        fn gc(&self, _: &Request) -> Result<Reply> {
            panic!("boom")
        }
        fn status(&self, _: &Request) -> Result<Reply> {
            Ok(Reply::Nothing)
        }
    }

    const ECHO: Builtin = Builtin { about: About { name: "echo", version: "0.0.1", summary: "test" }, plugin: &Echo };

    fn call(command: &str, stdin: serde_json::Value) -> (Option<serde_json::Value>, bool) {
        let vars = [("CNI_COMMAND", command), ("CNI_CONTAINERID", "c"), ("CNI_NETNS", "/x"), ("CNI_IFNAME", "eth0")];
        let env =
            Env::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).map(|e| e.unwrap());
        respond(&ECHO, env, Stdin::Bytes(Ok(stdin.to_string().into_bytes())))
    }

    #[test]
    fn version_is_answered_without_a_config() {
        let (out, ok) = call("VERSION", json!({"cniVersion": "0.3.1"}));
        assert!(ok);
        assert_eq!(out.unwrap()["cniVersion"], "0.3.1");
        let env = Env::from_vars(|k| (k == "CNI_COMMAND").then(|| "VERSION".to_string())).map(|e| e.unwrap());
        let (out, ok) = respond(&ECHO, env, Stdin::Bytes(Ok(Vec::new())));
        assert!(ok && out.unwrap()["supportedVersions"].as_array().unwrap().len() == 7);
    }

    #[test]
    fn results_are_rendered_in_the_requested_version() {
        let prev = json!({"ips": [{"address": "10.0.0.2/24"}]});
        let (out, ok) = call("ADD", json!({"cniVersion": "0.4.0", "name": "n", "prevResult": prev}));
        assert!(ok);
        assert_eq!(out.unwrap()["ips"][0]["version"], "4");
        let (out, _) = call("ADD", json!({"name": "n", "prevResult": prev}));
        assert_eq!(out.unwrap()["ip4"]["ip"], "10.0.0.2/24");
        assert_eq!(call("DEL", json!({"cniVersion": "1.0.0"})), (None, true));
    }

    #[test]
    fn errors_are_objects_in_the_configs_version() {
        let (out, ok) = call("CHECK", json!({"cniVersion": "1.0.0"}));
        assert!(!ok);
        assert_eq!(out.unwrap(), json!({"cniVersion": "1.0.0", "code": 104, "msg": "not recorded", "details": ""}));
        let (out, _) = call("ADD", json!({"cniVersion": "7.0.0"}));
        let out = out.unwrap();
        assert_eq!((out["code"].clone(), out["cniVersion"].clone()), (json!(1), json!("7.0.0")));
    }

    #[test]
    fn commands_newer_than_the_config_version_are_error_1() {
        for (cmd, version) in [("CHECK", "0.3.1"), ("GC", "1.0.0"), ("STATUS", "0.4.0")] {
            let (out, ok) = call(cmd, json!({"cniVersion": version}));
            assert!(!ok);
            assert_eq!(out.unwrap()["code"], 1, "{cmd} at {version}");
        }
    }

    #[test]
    fn a_panic_becomes_an_error_object() {
        install_panic_hook();
        let (out, ok) = call("GC", json!({"cniVersion": "1.1.0"}));
        assert!(!ok);
        let out = out.unwrap();
        assert_eq!(out["code"], 999);
        assert!(out["details"].as_str().unwrap().contains("boom"));
    }

    #[test]
    fn environment_and_stdin_errors_come_first() {
        let (out, _) = respond(&ECHO, Err(CniError::env("CNI_IFNAME", "missing")), Stdin::Bytes(Ok(b"{}".to_vec())));
        assert_eq!(out.unwrap()["code"], 4);
        let env = Env::from_vars(|k| (k == "CNI_COMMAND").then(|| "STATUS".to_string())).map(|e| e.unwrap());
        let (out, _) = respond(&ECHO, env, Stdin::Bytes(Err(CniError::io_problem("stdin", "too big"))));
        assert_eq!(out.unwrap()["code"], 5);
    }
}
