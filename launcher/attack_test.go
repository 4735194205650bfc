//go:build attack

// Independent attack on llmb-exec (issue 42, attack 42b), written from main.go and the docs before reading
// main_test.go. Seat: a hostile or broken API server answer, and hostile pod or namespace names in arguments.
// Built only with -tags attack; tests/launch/test_launcher_attack.py runs each probe and marks the ones that break a
// claim as strict expected failures (FINDING), so that the project's own `go test` stays green.
package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsServer upgrades every request and hands the connection to serve; it records the raw request path.
func wsServer(t *testing.T, serve func(*websocket.Conn)) (*httptest.Server, *atomic.Value) {
	t.Helper()
	var lastPath atomic.Value
	up := websocket.Upgrader{Subprotocols: subprotocols, CheckOrigin: func(*http.Request) bool { return true }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastPath.Store(r.URL.EscapedPath())
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		serve(conn)
	}))
	t.Cleanup(srv.Close)
	return srv, &lastPath
}

func tokenFile(t *testing.T) string {
	t.Helper()
	path := t.TempDir() + "/token"
	if err := os.WriteFile(path, []byte("secret-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func opts(t *testing.T, server, namespace, pod string) *options {
	return &options{server: server, tokenFile: tokenFile(t), caFile: t.TempDir() + "/none",
		namespace: namespace, pod: pod, container: "triton", command: []string{"true"},
		handshakeTimeout: 5 * time.Second}
}

func send(conn *websocket.Conn, channel byte, payload string) {
	_ = conn.WriteMessage(websocket.BinaryMessage, append([]byte{channel}, payload...))
}

func closeNormally(conn *websocket.Conn) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
}

// runWithin runs llmb-exec against o and fails the test if it does not end within limit.
func runWithin(t *testing.T, o *options, limit time.Duration) (int, string, string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code, err := run(o, &out, &errOut)
		if err != nil {
			errOut.WriteString(err.Error())
		}
		done <- result{code, out.String(), errOut.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(limit):
		t.Fatalf("llmb-exec still running after %s", limit)
		return 0, "", ""
	}
}

// TestAttackHostileNamesStayInTheirSegments: a pod or namespace name with '/', '..', '?', '#' or '%' must stay one
// path segment of .../namespaces/NS/pods/POD/exec and add no query parameter (no other resource, no other verb).
func TestAttackHostileNamesStayInTheirSegments(t *testing.T) {
	cases := []struct{ namespace, pod string }{
		{"ns", "../../../api/v1/namespaces/kube-system/pods/etcd"},
		{"ns", "victim/exec?command=id&container=other#"},
		{"ns", "a%2Fb"},
		{"kube-system/pods/etcd-0/exec?x=", "w-0-1"},
		{"..", ".."},
		{"ns", "w-0-1/attach"},
	}
	for _, c := range cases {
		srv, path := wsServer(t, func(conn *websocket.Conn) { send(conn, channelStatus, `{"status":"Success"}`) })
		o := opts(t, srv.URL, c.namespace, c.pod)
		runWithin(t, o, 10*time.Second)
		got, _ := path.Load().(string)
		segments := strings.Split(strings.TrimPrefix(got, "/"), "/")
		if len(segments) != 7 || segments[0] != "api" || segments[1] != "v1" || segments[2] != "namespaces" ||
			segments[4] != "pods" || segments[6] != "exec" {
			t.Errorf("namespace %q pod %q reached %q", c.namespace, c.pod, got)
		}
		target, _ := execURL(o)
		parsed, err := url.Parse(target)
		if err != nil || parsed.Fragment != "" || parsed.Query().Encode() != "command=true&container=triton&stderr=true&stdout=true" {
			t.Errorf("namespace %q pod %q made the URL %q", c.namespace, c.pod, target)
		}
	}
}

// TestAttackExitCodeConfusion: no answer but Status Success makes a failed or cut command look successful (0).
func TestAttackExitCodeConfusion(t *testing.T) {
	cases := map[string][]string{
		"exit code 0 in a failure":    {`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"0"}]}}`},
		"exit code 256 (0 mod 256)":   {`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"256"}]}}`},
		"negative exit code":          {`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"-256"}]}}`},
		"plus-signed zero":            {`{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"+0"}]}}`},
		"lower-case success":          {`{"status":"success"}`},
		"failure then success frames": {`{"status":"Failure","message":"boom"}`, `{"status":"Success"}`},
		"empty status object":         {`{}`},
		"status null":                 {`null`},
		"success with trailing junk":  {`{"status":"Success"}x`},
		"no status, normal close":     {},
	}
	for name, frames := range cases {
		srv, _ := wsServer(t, func(conn *websocket.Conn) {
			send(conn, channelStdout, "ok\n")
			for _, f := range frames {
				send(conn, channelStatus, f)
			}
			closeNormally(conn)
		})
		code, _, _ := runWithin(t, opts(t, srv.URL, "ns", "w-0-1"), 10*time.Second)
		if code == 0 {
			t.Errorf("%s: exit 0", name)
		}
	}
}

// TestAttackCutStreamIsNoSuccess: output then an abrupt TCP close, with no Status, is a lost rank (255), not 0.
func TestAttackCutStreamIsNoSuccess(t *testing.T) {
	srv, _ := wsServer(t, func(conn *websocket.Conn) {
		send(conn, channelStdout, "half")
		_ = conn.UnderlyingConn().Close()
	})
	code, _, _ := runWithin(t, opts(t, srv.URL, "ns", "w-0-1"), 10*time.Second)
	if code != failedToRun {
		t.Errorf("a cut stream exited %d", code)
	}
}

// TestAttackRedirectDoesNotCarryTheToken: an answer 307 to another host must not make llmb-exec send its bearer
// token there.
func TestAttackRedirectDoesNotCarryTheToken(t *testing.T) {
	var leaked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), "secret-token") {
			leaked.Add(1)
		}
		http.Error(w, "no", http.StatusForbidden)
	}))
	t.Cleanup(elsewhere.Close)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	code, _, _ := runWithin(t, opts(t, redirector.URL, "ns", "w-0-1"), 10*time.Second)
	if leaked.Load() != 0 || code != failedToRun {
		t.Errorf("exit %d, token sent to the redirect target %d times", code, leaked.Load())
	}
}

// TestAttackStatusThenNoClose: the exit Status is the end of the command; a server that sends it and then keeps
// the connection open (answering pings) must not keep the launch waiting forever.
func TestAttackStatusThenNoClose(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv, _ := wsServer(t, func(conn *websocket.Conn) {
		send(conn, channelStatus, `{"status":"Success"}`)
		go func() { // read, so that pings are answered with pongs
			for {
				if _, _, err := conn.ReadMessage(); err != nil {
					return
				}
			}
		}()
		<-release
	})
	code, _, _ := runWithin(t, opts(t, srv.URL, "ns", "w-0-1"), 15*time.Second)
	if code != 0 {
		t.Errorf("exit %d", code)
	}
}

// TestAttackHugeStatusIsBounded: the Status channel carries a short JSON object; a server that streams megabytes on
// it must not have llmb-exec buffer them all (it keeps `final` without a bound).
func TestAttackHugeStatusIsBounded(t *testing.T) {
	const frames, size = 64, 1 << 20
	var sent atomic.Int32
	srv, _ := wsServer(t, func(conn *websocket.Conn) {
		chunk := strings.Repeat(" ", size)
		for i := 0; i < frames; i++ {
			if conn.WriteMessage(websocket.BinaryMessage, append([]byte{channelStatus}, chunk...)) != nil {
				return
			}
			sent.Add(1)
		}
		closeNormally(conn)
	})
	code, _, _ := runWithin(t, opts(t, srv.URL, "ns", "w-0-1"), 30*time.Second)
	if code != failedToRun {
		t.Errorf("exit %d", code)
	}
	if sent.Load() == frames {
		t.Errorf("llmb-exec read all %d MiB of a Status channel (no bound)", frames*size>>20)
	}
}
