//! A **stand-in** Kubernetes API server (no Kubernetes cluster can run on this machine: no
//! kubelet, k3s or kind): plain HTTP/1.1 on loopback, answering the calls pincer's
//! Kubernetes engine makes — create a Job, read it, delete it — with the Job it was sent
//! and a status
//! that moves through a scripted list (running, some indexes done, complete or failed), as
//! the Job controller's would. It records what it was sent, and writes a kubeconfig that
//! points kube-rs at it.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The stand-in server; it runs until the test process ends.
#[derive(Debug, Clone)]
pub struct ApiServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Requests as (method, path).
    requests: Vec<(String, String)>,
    /// The Job created, if one was.
    job: Option<Value>,
    /// Statuses to answer reads with, in order; the last one repeats.
    statuses: Vec<Value>,
    reads: usize,
}

impl ApiServer {
    /// Starts a server whose Job, once created, reports `statuses` to successive reads.
    pub fn start(statuses: Vec<Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let state = Arc::new(Mutex::new(State {
            statuses,
            ..State::default()
        }));
        let s = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || serve(conn, &s));
            }
        });
        Self { url, state }
    }

    /// Writes a kubeconfig for this server into `dir`; returns its path (for `KUBECONFIG`).
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {}\nusers:\n- name: tester\n  user:\n    token: standin-token\ncontexts:\n- name: standin\n  context:\n    cluster: standin\n    user: tester\n    namespace: default\ncurrent-context: standin\n",
            self.url
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }

    /// The Job that was created, as sent.
    pub fn job(&self) -> Option<Value> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .job
            .clone()
    }

    /// The requests served, as (method, path).
    pub fn requests(&self) -> Vec<(String, String)> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .requests
            .clone()
    }
}

/// One connection: requests until the client closes it.
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let Ok(mut writer) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or_default().to_owned(),
            parts.next().unwrap_or_default().to_owned(),
        );
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (code, reply) = answer(state, &method, &path, &body);
        let text = reply.to_string();
        let head = format!(
            "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            text.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(text.as_bytes()).is_err()
        {
            return;
        }
    }
}

fn status_error(code: u16, reason: &str, message: &str) -> (String, Value) {
    (
        format!("{code} {reason}"),
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}),
    )
}

fn answer(state: &Mutex<State>, method: &str, path: &str, body: &[u8]) -> (String, Value) {
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    s.requests.push((method.to_owned(), path.to_owned()));
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let path = path.split('?').next().unwrap_or_default();
    match (method, path) {
        ("POST", p) if p == jobs => {
            let Ok(mut job) = serde_json::from_slice::<Value>(body) else {
                return status_error(400, "BadRequest", "the body is not JSON");
            };
            if s.job.is_some() {
                return status_error(409, "AlreadyExists", "jobs.batch already exists");
            }
            job["metadata"]["uid"] = json!("0b8e6c2e-standin");
            s.job = Some(job.clone());
            ("201 Created".into(), job)
        }
        ("GET", p) if p.starts_with(jobs) => {
            let name = p.trim_start_matches(jobs).trim_start_matches('/');
            let Some(mut job) = s.job.clone().filter(|j| j["metadata"]["name"] == name) else {
                return status_error(404, "NotFound", &format!("jobs.batch \"{name}\" not found"));
            };
            let i = s.reads.min(s.statuses.len().saturating_sub(1));
            s.reads += 1;
            job["status"] = s.statuses.get(i).cloned().unwrap_or_else(|| json!({}));
            ("200 OK".into(), job)
        }
        ("DELETE", p) if p.starts_with(jobs) => {
            let name = p.trim_start_matches(jobs).trim_start_matches('/');
            match s.job.take_if(|j| j["metadata"]["name"] == name) {
                Some(_) => {
                    s.reads = 0;
                    (
                        "200 OK".into(),
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
                    )
                }
                None => status_error(404, "NotFound", &format!("jobs.batch \"{name}\" not found")),
            }
        }
        _ => status_error(404, "NotFound", "the stand-in serves Jobs only"),
    }
}
