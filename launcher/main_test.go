package main

import (
	"bytes"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
)

// apiServer stands in for kube-apiserver's exec endpoint (the real one is tests/e2e/test_launcher_admission.py; kwok
// cannot send a NonZeroExitCode Status, a kubelet does): it records every request and answers with `answer`.
type apiServer struct {
	mu       sync.Mutex
	requests []*http.Request
	answer   func(w http.ResponseWriter, r *http.Request)
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.requests = append(a.requests, r)
	a.mu.Unlock()
	a.answer(w, r)
}

// streams upgrades as the API server does and sends these channel messages, then closes.
func streams(messages ...[]byte) func(http.ResponseWriter, *http.Request) {
	upgrader := websocket.Upgrader{Subprotocols: []string{"v5.channel.k8s.io"}}
	return func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		for _, m := range messages {
			_ = conn.WriteMessage(websocket.BinaryMessage, m)
		}
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	}
}

func channel(id byte, text string) []byte { return append([]byte{id}, text...) }

func start(t *testing.T, answer func(http.ResponseWriter, *http.Request)) (*apiServer, *options) {
	t.Helper()
	api := &apiServer{answer: answer}
	server := httptest.NewTLSServer(api)
	t.Cleanup(server.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	must(t, os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "token"), []byte("the-token\n"), 0o600))
	opts, err := parseArgs([]string{"--server", server.URL, "--token-file", filepath.Join(dir, "token"),
		"--ca-file", filepath.Join(dir, "ca.crt"), "-n", "serving", "-c", "triton", "big-0-1", "--",
		"/bin/sh", "-c", "orted --x 'a b'"})
	must(t, err)
	return api, opts
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOutputAndTheCommandsExitCode(t *testing.T) {
	exit3 := `{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}`
	api, opts := start(t, streams(channel(1, "out "), channel(2, "err"), channel(1, "more"), channel(3, exit3)))
	var stdout, stderr bytes.Buffer
	code, err := run(opts, &stdout, &stderr)
	if code != 3 || err != nil || stdout.String() != "out more" || stderr.String() != "err" {
		t.Fatalf("code %d err %v stdout %q stderr %q", code, err, stdout.String(), stderr.String())
	}
	// One request: the exec upgrade itself. No GET of the pod (the launcher role may not read pods).
	if len(api.requests) != 1 {
		t.Fatalf("%d requests, want 1", len(api.requests))
	}
	r := api.requests[0]
	if r.URL.Path != "/api/v1/namespaces/serving/pods/big-0-1/exec" || r.Header.Get("Authorization") != "Bearer the-token" {
		t.Fatalf("path %q auth %q", r.URL.Path, r.Header.Get("Authorization"))
	}
	q := r.URL.Query()
	if strings.Join(q["command"], "|") != "/bin/sh|-c|orted --x 'a b'" || q.Get("container") != "triton" ||
		q.Get("stdout") != "true" || q.Get("stderr") != "true" || q.Has("stdin") || q.Has("tty") {
		t.Fatalf("query %v", q)
	}
	if got := r.Header.Get("Sec-WebSocket-Protocol"); got != "v5.channel.k8s.io, v4.channel.k8s.io" {
		t.Fatalf("subprotocols %q", got)
	}
}

func TestSuccessIsZero(t *testing.T) {
	_, opts := start(t, streams(channel(3, `{"metadata":{},"status":"Success"}`)))
	if code, err := run(opts, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 || err != nil {
		t.Fatalf("code %d err %v", code, err)
	}
}

func TestAStreamCutBeforeTheStatusFailsToRun(t *testing.T) {
	_, opts := start(t, func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{Subprotocols: []string{"v5.channel.k8s.io"}}).Upgrade(w, r, nil)
		if err == nil {
			_ = conn.WriteMessage(websocket.BinaryMessage, channel(1, "partial"))
			conn.Close() // no close message, no status: the node or the API server went away
		}
	})
	code, err := run(opts, &bytes.Buffer{}, &bytes.Buffer{})
	if code != failedToRun || err == nil || !strings.Contains(err.Error(), "connection lost") {
		t.Fatalf("code %d err %v", code, err)
	}
}

func TestAFailureThatIsNoExitCodeFailsToRunWithItsMessage(t *testing.T) {
	_, opts := start(t, streams(channel(3, `{"status":"Failure","message":"container not found (\"triton\")"}`)))
	code, err := run(opts, &bytes.Buffer{}, &bytes.Buffer{})
	if code != failedToRun || err == nil || err.Error() != `container not found ("triton")` {
		t.Fatalf("code %d err %v", code, err)
	}
}

func TestARefusalSaysTheAPIServersReasonEvenWhenItsBodyIsCut(t *testing.T) {
	// An admission refusal with causes runs past the 1,024 bytes gorilla keeps of a failed handshake's body.
	long := strings.Repeat("x", 3000)
	body := `{"kind":"Status","status":"Failure","message":"pods \"db\" is forbidden: ValidatingAdmissionPolicy ` +
		`'llmbackend-launcher-exec' denied request: \u003cnot yours\u003e","details":{"causes":[{"message":"` + long + `"}]}}`
	_, opts := start(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(body))
	})
	code, err := run(opts, &bytes.Buffer{}, &bytes.Buffer{})
	want := `pods "db" is forbidden: ValidatingAdmissionPolicy 'llmbackend-launcher-exec' denied request: <not yours> (HTTP 403)`
	if code != failedToRun || err == nil || err.Error() != want {
		t.Fatalf("code %d err %v", code, err)
	}
}

func TestNamesCannotReachAnotherPath(t *testing.T) {
	opts := &options{server: "https://10.96.0.1:443", namespace: "a/../b", pod: "p?x=1#y", command: []string{"true"}}
	u, err := execURL(opts)
	must(t, err)
	if !strings.HasPrefix(u, "wss://10.96.0.1:443/api/v1/namespaces/a%2F..%2Fb/pods/p%3Fx=1%23y/exec?") {
		t.Fatal(u)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"pod"}, {"pod", "true"}, {"pod", "--"}} {
		if _, err := parseArgs(append([]string{"--server", "https://x"}, args...)); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}
