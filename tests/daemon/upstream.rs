//! A fake model provider on 127.0.0.1:0 that replays canned HTTP responses (real SSE bodies)
//! and records the request bodies it received.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// One canned answer.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    /// Close the connection after the body without finishing the stream.
    pub drop: bool,
}

impl Reply {
    pub fn sse(events: &[Value]) -> Self {
        let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        body.push_str("data: [DONE]\n\n");
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body,
            drop: false,
        }
    }

    /// An Anthropic Messages stream: each event named by its `type`, and no `[DONE]`.
    pub fn anthropic(events: &[Value]) -> Self {
        let body = events
            .iter()
            .map(|e| {
                let kind = e["type"].as_str().unwrap_or("message");
                format!("event: {kind}\ndata: {e}\n\n")
            })
            .collect();
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body,
            drop: false,
        }
    }

    pub fn status(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: body.into(),
            drop: false,
        }
    }
}

pub struct Upstream {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Value>>>,
}

pub fn start(replies: Vec<Reply>) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = requests.clone();
    std::thread::spawn(move || {
        let mut replies = replies.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(value) = line.to_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            recorded
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            let Some(reply) = replies.next() else { return };
            let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
            for (name, value) in &reply.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            if !reply.drop {
                head.push_str(&format!("content-length: {}\r\n", reply.body.len()));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(reply.body.as_bytes());
            let _ = stream.flush();
        }
    });
    Upstream { url, requests }
}
