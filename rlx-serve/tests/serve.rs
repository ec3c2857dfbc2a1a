//! rlx-serve as its clients see it, on loopback with SmolLM2-135M-Instruct: the official
//! `openai` Python package (chat, streaming, completions, embeddings, errors), hostile raw
//! HTTP that must get OpenAI error objects while the server stays up, a client leaving
//! mid-stream, the bounded queue, timeouts, a graceful shutdown, and MLX.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rlx-serve"))
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rlx-serve starts");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on http://").nth(1) {
                    let _ = tx.send(addr.trim().to_string());
                }
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|_| panic!("rlx-serve did not start:\n{}", log.lock().unwrap()));
        Server { child, addr, log }
    }

    fn raw(&self, raw: &[u8]) -> (u16, String) {
        send(&self.addr, raw)
    }

    fn request(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        request(&self.addr, method, path, body)
    }

    fn post(&self, path: &str, body: &str) -> (u16, String) {
        self.request("POST", path, body.as_bytes())
    }

    /// Opens a streamed request and returns the connection after its first event.
    fn open_stream(&self, path: &str, body: &str) -> BufReader<TcpStream> {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut reader = BufReader::new(stream);
        write!(
            reader.get_mut(),
            "POST {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut line = String::new();
        while !line.contains("data: ") {
            line.clear();
            assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended");
        }
        reader
    }

    fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.request("GET", "/metrics", b"");
        let body = body
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_string);
        body.and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `raw` on a fresh connection to `addr` and returns the status and body of the
/// answer.
fn send(addr: &str, raw: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |p| p.1)
        .to_string();
    (status, body)
}

fn request(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    send(addr, &raw)
}

/// What is left of a stream, to its end.
fn rest(mut reader: BufReader<TcpStream>) -> String {
    let mut text = String::new();
    let _ = reader.read_to_string(&mut text);
    text
}

fn openai_error(status: u16, body: &str) -> serde_json::Value {
    let value: serde_json::Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("status {status}, body not JSON ({e}): {body:?}"));
    assert!(value["error"]["message"].is_string(), "{body}");
    value
}

#[test]
fn clients_hostile_input_cancellation_and_shutdown() {
    let mut server = Server::start(&["--slots", "4", "--context", "512"]);
    let chat = "/v1/chat/completions";
    let long_prompt = format!(
        "{{\"prompt\": [{}], \"max_tokens\": 4}}",
        vec!["42"; 600].join(",")
    );
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (chat, b"{bad".to_vec(), 400),
        (chat, b"".to_vec(), 400),
        (chat, br#"{"messages": 5}"#.to_vec(), 400),
        (chat, b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}".to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":-1}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":1e12}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":99999999999}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"temperature":-1}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"top_p":0}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"n":1000}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d","e"]}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":"hi"}],"top_logprobs":3}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#.to_vec(), 400),
        (chat, br#"{"messages":[{"role":"wizard","content":"hi"}]}"#.to_vec(), 400),
        (chat, br#"{"messages":[]}"#.to_vec(), 400),
        (chat, br#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#.to_vec(), 404),
        (chat, nested.clone().into_bytes(), 400),
        (chat, vec![b' '; 3 << 20], 413),
        ("/v1/completions", long_prompt.into_bytes(), 400),
        ("/v1/completions", br#"{"prompt":[99999999]}"#.to_vec(), 400),
        ("/v1/completions", br#"{"prompt":[]}"#.to_vec(), 400),
        ("/v1/completions", br#"{"prompt":"hi","logprobs":99}"#.to_vec(), 400),
        ("/v1/completions", br#"{"prompt":"hi","echo":true}"#.to_vec(), 400),
        ("/v1/completions", br#"{"prompt":{"text":"hi"}}"#.to_vec(), 400),
        ("/v1/embeddings", br#"{"input":[]}"#.to_vec(), 400),
        ("/v1/embeddings", br#"{"input":"hi","encoding_format":"hex"}"#.to_vec(), 400),
        ("/v1/embeddings", br#"{"input":"hi","model":"ada"}"#.to_vec(), 404),
        ("/v1/nothing", b"{}".to_vec(), 404),
    ];
    let mut outcomes = std::collections::BTreeMap::new();
    for (path, body, expected) in &cases {
        let (status, answer) = server.request("POST", path, body);
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        assert_eq!(status, *expected, "{path} {shown}: {answer}");
        openai_error(status, &answer);
        *outcomes.entry(status).or_insert(0) += 1;
    }
    let (status, answer) = server.request("DELETE", "/v1/models", b"");
    assert_eq!(status, 405, "{answer}");
    openai_error(status, &answer);
    // Not HTTP at all, and a body shorter than it says: the connection ends, the server
    // does not.
    let (status, _) = server.raw(b"HELLO THERE\r\n\r\n");
    assert_eq!(status, 400);
    let mut cut = TcpStream::connect(&server.addr).unwrap();
    cut.write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 500\r\n\r\n{\"prompt\"")
        .unwrap();
    drop(cut);
    eprintln!(
        "hostile requests: {} cases, statuses {outcomes:?}",
        cases.len() + 3
    );

    // Still serving; nulls are as good as absent.
    let (status, answer) = server.request("GET", "/health", b"");
    assert_eq!((status, answer.as_str()), (200, r#"{"status":"ok"}"#));
    let (status, answer) = server.post(
        chat,
        r#"{"messages":[{"role":"user","content":null}],"temperature":null,"max_tokens":2}"#,
    );
    assert_eq!(status, 200, "{answer}");

    // A client that leaves mid-stream: its sequence is cancelled and its slot freed.
    let before = server.metric("rlx_sequences_cancelled_total");
    let reader = server.open_stream(
        "/v1/completions",
        r#"{"prompt":"Once upon a time","max_tokens":400,"temperature":0,"stream":true}"#,
    );
    drop(reader);
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.metric("rlx_sequences_cancelled_total") <= before {
        assert!(Instant::now() < deadline, "the stream was not cancelled");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.metric("rlx_running_sequences"), 0.0);
    // Whole (not streamed) answers too: the handler is dropped with the connection.
    let body = r#"{"prompt":"Once upon a time","max_tokens":400,"temperature":0}"#;
    let mut gone = TcpStream::connect(&server.addr).unwrap();
    write!(
        gone,
        "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.metric("rlx_sequences_cancelled_total") <= before + 1.0 {
        assert!(
            Instant::now() < deadline,
            "the whole answer was not cancelled"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The official client.
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    // Where `.ci/run` installs the client: `pip install --target target/python openai`.
    let installed = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/python");
    let path = match std::env::var("PYTHONPATH") {
        Ok(more) if !more.is_empty() => format!("{installed}:{more}"),
        _ => installed.to_string(),
    };
    let has_openai = Command::new(&python)
        .env("PYTHONPATH", &path)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if has_openai {
        openai_client(&server, &python, &path);
    } else {
        assert!(
            std::env::var_os("RLX_REQUIRE_OPENAI").is_none(),
            "RLX_REQUIRE_OPENAI is set but `{python} -c 'import openai'` fails"
        );
        eprintln!("skipping the openai client checks: no `openai` package for {python}");
    }

    // A shutdown signal lets the running stream finish.
    let stream = server.open_stream(
        "/v1/completions",
        r#"{"prompt":"Hello","max_tokens":24,"temperature":0,"stream":true}"#,
    );
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let text = rest(stream);
    assert!(text.contains("data: [DONE]"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            assert!(status.success(), "{status}\n{}", server.log.lock().unwrap());
            break;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tests/openai_client.py` against `server`.
fn openai_client(server: &Server, python: &str, path: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_client.py");
    let base = format!("http://{}/v1", server.addr);
    let out = Command::new(python)
        .env("PYTHONPATH", path)
        .args([script, &base, "SmolLM2-135M-Instruct.Q4_1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log.lock().unwrap()
    );
    assert_eq!(server.metric("rlx_running_sequences"), 0.0);
}

#[test]
fn queue_bound_and_timeouts() {
    let server = Server::start(&[
        "--slots",
        "1",
        "--max-queue",
        "1",
        "--timeout",
        "2",
        "--context",
        "1024",
        "--embeddings",
        "none",
    ]);
    let counting = r#"{"prompt":"Count from one to one thousand: one, two, three, four,","max_tokens":1000,"temperature":0,"stream":true}"#;
    // One running, one waiting, the next turned away (429).
    let running = server.open_stream("/v1/completions", counting);
    let addr = server.addr.clone();
    let waiting = std::thread::spawn(move || {
        let body = br#"{"prompt":"Count from one to one thousand:","max_tokens":480}"#;
        request(&addr, "POST", "/v1/completions", body)
    });
    std::thread::sleep(Duration::from_millis(100));
    let (status, answer) = server.post("/v1/completions", r#"{"prompt":"Hello","max_tokens":2}"#);
    assert_eq!(status, 429, "{answer}");
    assert_eq!(
        openai_error(status, &answer)["error"]["code"],
        "server_busy"
    );
    // The running stream hits its time limit: an error event ends it.
    let text = rest(running);
    assert!(text.contains(r#""code":"timeout""#), "{text}");
    // The waiting one runs out of time too (its time counts from its arrival).
    let (status, answer) = waiting.join().unwrap();
    assert_eq!(status, 504, "{answer}");
    assert!(answer.contains("limit of 2 s"), "{answer}");
}

#[cfg(feature = "mlx")]
#[test]
fn serves_on_mlx() {
    let server = Server::start(&[
        "--backend",
        "mlx",
        "--slots",
        "2",
        "--context",
        "256",
        "--embeddings",
        "none",
    ]);
    let question = r#"{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0,"max_tokens":20}"#;
    let (status, answer) = server.post("/v1/chat/completions", question);
    assert_eq!(status, 200, "{answer}");
    let body: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("Paris"), "{answer}");
    let reader = server.open_stream(
        "/v1/completions",
        r#"{"prompt":"The three primary colors are","max_tokens":6,"temperature":0,"stream":true}"#,
    );
    let text = rest(reader);
    assert!(text.contains("data: [DONE]"), "{text}");
}
