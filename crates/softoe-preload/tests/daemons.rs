//! Daemons whose processes share their sockets, unmodified, on softoe:
//! rsync (a daemon that forks per client, and whose client and server each
//! fork into a reader and a writer of one connection), haproxy (a
//! master-worker reload, and a reload that takes the listeners from the
//! old process over its stats socket with `SCM_RIGHTS`, both under load),
//! and vsftpd in Debian's configuration (its privileged process hands data
//! connections to the session's process over a Unix socket), passive and
//! active, up and down. Every byte is checked at the far end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod shim;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, LINUX_IP, sha256};

/// Runs `c` to its end; fails with its output unless it succeeds.
fn ok(c: Command, secs: u64, what: &str) -> std::process::Output {
    let o = run_for(c, secs, what);
    assert!(
        o.status.success(),
        "{what}: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A tree of files of known content (one large, many small): name → SHA-256.
fn tree(dir: &Path) -> Vec<(String, String)> {
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let mut out = Vec::new();
    let (_, h) = pattern_file(dir, "big.bin", 24 << 20);
    out.push(("big.bin".to_string(), h));
    for i in 0..300usize {
        let name = format!("sub/f{i}");
        let (_, h) = pattern_file(dir, &name, 1000 + i * 7919);
        out.push((name, h));
    }
    out
}

/// Changes every file of `dir` a little (a few bytes in the middle, more
/// at the end), as files change between two rsync runs: the next run is a
/// delta transfer, with the generator's block checksums flowing one way
/// while the receiver reads the deltas the other. Returns the new hashes.
fn touch_tree(dir: &Path, files: &[(String, String)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(name, _)| {
            let p = dir.join(name);
            let mut b = std::fs::read(&p).unwrap();
            let mid = b.len() / 2;
            for (k, x) in b[mid..].iter_mut().take(64).enumerate() {
                *x ^= (k as u8) | 1;
            }
            b.extend_from_slice(name.as_bytes());
            std::fs::write(&p, &b).unwrap();
            (name.clone(), sha256(&b))
        })
        .collect()
}

/// Whether `dir` holds exactly the files of `want`, with their contents.
fn same_tree(dir: &Path, want: &[(String, String)]) {
    for (name, h) in want {
        let got = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&sha256(&got), h, "{name} differs");
    }
}

/// An rsync daemon configuration with one writable module at `module`.
fn rsyncd_conf(dir: &Path, module: &Path, tag: &str) -> PathBuf {
    let conf = dir.join(format!("rsyncd-{tag}.conf"));
    std::fs::write(
        &conf,
        format!(
            "uid = root\ngid = root\nuse chroot = no\npid file = {}/rsyncd-{tag}.pid\n\
             [mod]\n    path = {}\n    read only = false\n",
            dir.display(),
            module.display()
        ),
    )
    .unwrap();
    conf
}

/// Waits until `addr:port` accepts connections (from the Linux side).
fn wait_serving(bed: &Bed, port: u16) {
    let end = Instant::now() + Duration::from_secs(20);
    while bed
        .linux
        .run(move || {
            std::net::TcpStream::connect_timeout(
                &std::net::SocketAddrV4::new(ENGINE_IP, port).into(),
                Duration::from_secs(1),
            )
            .is_err()
        })
        .unwrap()
    {
        assert!(Instant::now() < end, "nothing serves port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// rsync's daemon on softoe: a Linux client pushes a tree into its module
/// and pulls it back, every file checked. The daemon forks per client, and
/// the receiving side forks again into a generator and a receiver that
/// share the connection (rsync failed with `unexpected tag -15`).
#[test]
fn rsync_daemon_on_softoe_push_and_pull() {
    if !have("rsync") {
        return;
    }
    let bed = bed();
    let dir = tempdir("rsyncd");
    let src = dir.join("src");
    let want = tree(&src);
    let module = dir.join("module");
    let back = dir.join("back");
    std::fs::create_dir_all(&module).unwrap();
    let conf = rsyncd_conf(&dir, &module, "softoe");
    let _daemon = Child(
        on_softoe(&bed, "rsync")
            .args(["--daemon", "--no-detach", "--port=8730"])
            .arg(format!("--config={}", conf.display()))
            .arg(format!("--address={ENGINE_IP}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_serving(&bed, 8730);
    let url = format!("rsync://{ENGINE_IP}:8730/mod/");
    let mut push = on_linux(&bed, "rsync");
    push.arg("-a").arg(format!("{}/", src.display())).arg(&url);
    ok(push, 120, "rsync push to the daemon on softoe");
    same_tree(&module, &want);
    let mut pull = on_linux(&bed, "rsync");
    pull.arg("-a").arg(&url).arg(format!("{}/", back.display()));
    ok(pull, 120, "rsync pull from the daemon on softoe");
    same_tree(&back, &want);
    // Again with every file changed: deltas both ways.
    let want = touch_tree(&src, &want);
    let mut push = on_linux(&bed, "rsync");
    push.args(["-a", "--no-whole-file"])
        .arg(format!("{}/", src.display()))
        .arg(&url);
    ok(push, 120, "rsync delta push to the daemon on softoe");
    same_tree(&module, &want);
    let mut pull = on_linux(&bed, "rsync");
    pull.args(["-a", "--no-whole-file"])
        .arg(&url)
        .arg(format!("{}/", back.display()));
    ok(pull, 120, "rsync delta pull from the daemon on softoe");
    same_tree(&back, &want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// rsync's client on softoe against a daemon on Linux: push, then pull.
#[test]
fn rsync_client_on_softoe_push_and_pull() {
    if !have("rsync") {
        return;
    }
    let bed = bed();
    let dir = tempdir("rsync-client");
    let src = dir.join("src");
    let want = tree(&src);
    let module = dir.join("module");
    let back = dir.join("back");
    std::fs::create_dir_all(&module).unwrap();
    let conf = rsyncd_conf(&dir, &module, "linux");
    let _daemon = Child(
        on_linux(&bed, "rsync")
            .args(["--daemon", "--no-detach", "--port=8731"])
            .arg(format!("--config={}", conf.display()))
            .arg(format!("--address={LINUX_IP}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&bed, 8731);
    let url = format!("rsync://{LINUX_IP}:8731/mod/");
    let mut push = on_softoe(&bed, "rsync");
    push.arg("-a").arg(format!("{}/", src.display())).arg(&url);
    ok(push, 120, "rsync push from softoe");
    same_tree(&module, &want);
    let mut pull = on_softoe(&bed, "rsync");
    pull.arg("-a").arg(&url).arg(format!("{}/", back.display()));
    ok(pull, 120, "rsync pull to softoe");
    same_tree(&back, &want);
    let want = touch_tree(&src, &want);
    let mut push = on_softoe(&bed, "rsync");
    push.args(["-a", "--no-whole-file"])
        .arg(format!("{}/", src.display()))
        .arg(&url);
    ok(push, 120, "rsync delta push from softoe");
    same_tree(&module, &want);
    let mut pull = on_softoe(&bed, "rsync");
    pull.args(["-a", "--no-whole-file"])
        .arg(&url)
        .arg(format!("{}/", back.display()));
    ok(pull, 120, "rsync delta pull to softoe");
    same_tree(&back, &want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Linux client that fetches `url` over and over for `secs`, checking
/// each body against `want` (its SHA-256); prints "ok N bad M ...".
const LOAD: &str = "import http.client,hashlib,sys,time\n\
    host,port,path,want,secs=sys.argv[1],int(sys.argv[2]),sys.argv[3],sys.argv[4],float(sys.argv[5])\n\
    end=time.time()+secs; ok=bad=0; errs={}\n\
    while time.time()<end:\n\
    \x20   t0=time.time(); phase='connect'\n\
    \x20   try:\n\
    \x20       c=http.client.HTTPConnection(host,port,timeout=10); c.connect(); phase='request'\n\
    \x20       c.request('GET',path); phase='response'\n\
    \x20       r=c.getresponse(); b=r.read(); c.close()\n\
    \x20       if r.status==200 and hashlib.sha256(b).hexdigest()==want: ok+=1\n\
    \x20       else: bad+=1; errs[r.status]=errs.get(r.status,0)+1\n\
    \x20   except Exception as e:\n\
    \x20       bad+=1; k=repr(e)[:60]+' in '+phase+' at %.3f' % t0; errs[k]=errs.get(k,0)+1\n\
    print('ok',ok,'bad',bad,errs,flush=True)\n\
    sys.exit(0 if bad==0 and ok>0 else 1)\n";

/// haproxy's configuration: a frontend on the engine's address, a backend
/// on Linux, and a stats socket that hands the listeners to a successor.
fn haproxy_conf(dir: &Path, port: u16, backend: u16) -> PathBuf {
    let conf = dir.join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "global\n    stats socket {d}/stats.sock mode 600 level admin expose-fd listeners\n\
             defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\
             frontend fe\n    bind {ENGINE_IP}:{port}\n    default_backend be\n\
             backend be\n    server s1 {LINUX_IP}:{backend}\n",
            d = dir.display()
        ),
    )
    .unwrap();
    conf
}

/// A Linux web server on `port` serving `dir`.
fn linux_web(bed: &Bed, dir: &Path, port: u16) -> Child {
    let c = Child(
        on_linux(bed, "python3")
            .args(["-m", "http.server", &port.to_string(), "--bind"])
            .arg(LINUX_IP.to_string())
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(bed, port);
    c
}

/// The load client, started for `secs` against the frontend on `port`.
fn load(
    bed: &Bed,
    port: u16,
    want: &str,
    secs: u32,
) -> std::thread::JoinHandle<std::process::Output> {
    let mut c = on_linux(bed, "python3");
    c.args(["-c", LOAD]).arg(ENGINE_IP.to_string()).args([
        &port.to_string(),
        "/blob",
        want,
        &secs.to_string(),
    ]);
    std::thread::spawn(move || run_for(c, u64::from(secs) + 60, "the load client"))
}

/// haproxy in master-worker mode (`-W`) on softoe, reloaded twice (the
/// master re-execs itself and takes the listeners back from the old worker
/// over a Unix socket) while a client fetches without pause: no request
/// fails. Before, the master lost every listener (`could not share an
/// inherited listener … ENOENT`).
#[test]
fn haproxy_master_worker_reloads_under_load() {
    if !have("haproxy") || !have("python3") {
        return;
    }
    let bed = bed();
    let dir = tempdir("haproxy-w");
    let (_, want) = pattern_file(&dir, "blob", 200_000);
    let _web = linux_web(&bed, &dir, 8090);
    let conf = haproxy_conf(&dir, 8080, 8090);
    let master = Child(
        on_softoe(&bed, "haproxy")
            .args(["-W", "-db", "-f"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_serving(&bed, 8080);
    let client = load(&bed, 8080, &want, 8);
    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(2));
        // SAFETY: kill takes no pointers; the pid is our own child's.
        unsafe { libc::kill(master.0.id() as i32, libc::SIGUSR2) };
    }
    let o = client.join().unwrap();
    assert!(
        o.status.success(),
        "requests failed across the reloads: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// haproxy's hitless reload: a new process takes the listeners from the
/// old one over its stats socket (`-x`, `SCM_RIGHTS`) and tells it to
/// finish (`-sf`), while a client fetches without pause: no request fails.
#[test]
fn haproxy_reload_takes_listeners_over_its_stats_socket_under_load() {
    if !have("haproxy") || !have("python3") {
        return;
    }
    let bed = bed();
    let dir = tempdir("haproxy-x");
    let (_, want) = pattern_file(&dir, "blob", 200_000);
    let _web = linux_web(&bed, &dir, 8091);
    let conf = haproxy_conf(&dir, 8081, 8091);
    let mut old = Child(
        on_softoe(&bed, "haproxy")
            .args(["-db", "-f"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_serving(&bed, 8081);
    let client = load(&bed, 8081, &want, 6);
    std::thread::sleep(Duration::from_secs(2));
    let _new = Child(
        on_softoe(&bed, "haproxy")
            .args(["-db", "-f"])
            .arg(&conf)
            .arg("-x")
            .arg(dir.join("stats.sock"))
            .arg("-sf")
            .arg(old.0.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let o = client.join().unwrap();
    assert!(
        o.status.success(),
        "requests failed across the reload: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // The old process finished once its listeners were handed over.
    let end = Instant::now() + Duration::from_secs(10);
    while old.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "the old haproxy did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A local user for vsftpd's logins, removed when dropped.
struct FtpUser(&'static str);

impl FtpUser {
    fn make(home: &Path) -> FtpUser {
        let name = "softoeftp";
        let _ = Command::new("userdel").args(["-r", name]).status();
        let mut c = Command::new("useradd");
        c.args(["-M", "-s", "/bin/sh", "-d"]).arg(home).arg(name);
        ok(c, 30, "useradd");
        std::fs::create_dir_all(home).unwrap();
        let mut c = Command::new("chown");
        c.arg(format!("{name}:{name}")).arg(home);
        ok(c, 30, "chown");
        let mut p = Command::new("chpasswd")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(
            p.stdin.as_mut().unwrap(),
            format!("{name}:Softoe-ftp-1\n").as_bytes(),
        )
        .unwrap();
        drop(p.stdin.take());
        assert!(p.wait().unwrap().success(), "chpasswd");
        FtpUser(name)
    }
}

impl Drop for FtpUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(self.0).status();
    }
}

/// Uploads 4 MiB and downloads it back through Python's ftplib, in
/// passive (`pasv`) or active mode; prints the outcome.
const FTP: &str = "import ftplib,io,os,sys\n\
    host,pasv=sys.argv[1],sys.argv[2]=='pasv'\n\
    data=os.urandom(4<<20)\n\
    f=ftplib.FTP(); f.connect(host,2121,timeout=30); f.login('softoeftp','Softoe-ftp-1'); f.set_pasv(pasv)\n\
    name='up-%s.bin' % sys.argv[2]\n\
    f.storbinary('STOR '+name, io.BytesIO(data))\n\
    got=io.BytesIO(); f.retrbinary('RETR '+name, got.write)\n\
    f.quit()\n\
    print(sys.argv[2], 'same' if got.getvalue()==data else 'DIFFERENT', len(got.getvalue()), flush=True)\n\
    sys.exit(0 if got.getvalue()==data else 1)\n";

/// vsftpd on softoe with Debian's `/etc/vsftpd.conf` (one process per
/// session, privilege separation: the privileged process makes the data
/// connections and passes them to the session's process over a Unix
/// socket), allowed to write and on its own port: a Linux client logs in,
/// uploads and downloads in passive and in active mode. Before, every
/// transfer failed with `426 Failure writing network stream`.
#[test]
fn vsftpd_default_config_passive_and_active_up_and_down() {
    if !have("vsftpd") || !have("python3") || !have("useradd") {
        return;
    }
    let conf = Path::new("/etc/vsftpd.conf");
    assert!(conf.exists(), "vsftpd's configuration file is missing");
    let bed = bed();
    let dir = tempdir("vsftpd");
    let home = dir.join("home");
    let _user = FtpUser::make(&home);
    // The directory the package's service makes for its chroot.
    std::fs::create_dir_all("/var/run/vsftpd/empty").unwrap();
    let _server = Child(
        on_softoe(&bed, "vsftpd")
            .arg(conf)
            .args(["-olisten_port=2121", "-owrite_enable=YES"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_serving(&bed, 2121);
    for mode in ["pasv", "active"] {
        let mut c = on_linux(&bed, "python3");
        c.args(["-c", FTP]).arg(ENGINE_IP.to_string()).arg(mode);
        ok(c, 120, &format!("ftp {mode}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
