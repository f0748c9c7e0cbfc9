//! One of this program's own delegates, run inside this process as
//! [`super::process`] would run its file: with the caller's environment,
//! `CNI_COMMAND` and the call's variables set and no stale stack variable;
//! with the input as its stdin, under the same bound; and its answer read
//! back from the bytes it would have printed, with the exit status it would
//! have had, through the same checks.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use serde_json::Value;
use shared::config::{printed_len, read_bounded, STDIN_LIMIT};
use shared::plugin::Stdin;
use shared::{plugin, Builtin, Env, Result};

use super::answer::{interpret, interpret_value};
use super::runner::{Call, Input, Runner};

pub struct InProcess(pub &'static Builtin);

impl Runner for InProcess {
    /// Nothing here can kill it at the deadline; it needs nothing to: told the
    /// deadline and the lock budget in the variables, its lock waits end at
    /// them, and it answers 105 or 11 itself, as its process would before
    /// being killed.
    fn run(&self, call: Call) -> Result<Option<Value>> {
        let env = Env::in_process(call.command, call.vars);
        let stdin = match call.input {
            // The value its process would parse the text to, within the
            // bound its process reads under.
            Input::Value(value) if printed_len(&value) <= STDIN_LIMIT => Stdin::Value(value),
            input => Stdin::Bytes(read_bounded(input.text().as_ref(), "stdin")),
        };
        let (answer, success) = plugin::respond(self.0, env, stdin);
        let status = ExitStatus::from_raw(if success { 0 } else { 1 << 8 });
        match answer {
            // What its process would print is that value's text, a line.
            Some(json) => interpret_value(self.0.about.name, json, status),
            None => interpret(self.0.about.name, b"", status),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;
    use shared::{About, CniError, Code, Command, Plugin, Reply, Request};

    use super::*;

    /// Answers ADD with its input (as a result's pools, which keep any
    /// JSON), DEL with an error naming the configuration's name.
    struct Mirror;
    impl Plugin for Mirror {
        fn add(&self, req: &Request) -> Result<Reply> {
            Ok(Reply::Result(shared::IpamResult { pools: Some(vec![req.config.raw.clone()]), ..Default::default() }))
        }
        fn del(&self, req: &Request) -> Result<Reply> {
            Err(CniError::new(Code::Internal, format!("no DEL for {}", req.config.name()?)))
        }
        fn check(&self, _: &Request) -> Result<Reply> {
            Ok(Reply::Nothing)
        }
        fn gc(&self, _: &Request) -> Result<Reply> {
            Ok(Reply::Nothing)
        }
        fn status(&self, _: &Request) -> Result<Reply> {
            Ok(Reply::Nothing)
        }
    }

    static MIRROR: Builtin =
        Builtin { about: About { name: "mirror", version: "0", summary: "test" }, plugin: &Mirror };

    fn run(command: Command, input: Input) -> Result<Option<Value>> {
        let vars = [("CNI_CONTAINERID", "c".to_string()), ("CNI_IFNAME", "eth0".into()), ("CNI_NETNS", "/x".into())];
        InProcess(&MIRROR).run(Call { command, input, deadline: Instant::now(), vars: &vars })
    }

    /// A stack hands the delegates it runs in its process their input as a
    /// value: each must answer exactly as when given that value's text, as
    /// its process is (tests/in_process.rs compares whole stacks).
    #[test]
    fn a_value_is_answered_as_its_text_is() {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "x": [1, 2.5, "é\n"], "prevResult": {"ips": []}});
        for command in [Command::Add, Command::Del] {
            let by_text = run(command, Input::Text(conf.to_string().as_bytes()));
            assert_eq!(run(command, Input::Value(conf.clone())), by_text, "{command:?}");
        }
        let bad_version = json!({"cniVersion": "7.0.0", "name": "n"});
        let e = run(Command::Add, Input::Value(bad_version.clone())).unwrap_err();
        assert_eq!(Err(e), run(Command::Add, Input::Text(bad_version.to_string().as_bytes())));
    }

    /// Past the bound a process reads its stdin under, a value is error 5 as
    /// its text is; and the answer is bounded as a process's output is.
    #[test]
    fn values_are_bounded_as_text_is() {
        let big = "a".repeat(STDIN_LIMIT as usize);
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "x": big});
        let e = run(Command::Add, Input::Value(conf.clone())).unwrap_err();
        assert!(e.code == 5 && e.msg.contains("more than"), "{e}");
        assert_eq!(Err(e), run(Command::Add, Input::Text(conf.to_string().as_bytes())));
        // Its input just fits; its answer (the input and more) does not.
        let fits = json!({"cniVersion": "1.0.0", "name": "n", "x": "a".repeat(STDIN_LIMIT as usize - 64)});
        let e = run(Command::Add, Input::Value(fits.clone())).unwrap_err();
        assert!(e.code == 5 && e.msg.contains("output of delegate \"mirror\""), "{e}");
        assert_eq!(Err(e), run(Command::Add, Input::Text(fits.to_string().as_bytes())));
    }
}
