// Command llmb-exec runs a command in a container of a pod through the API server's exec subresource, as
// `kubectl exec` does, but without reading the pod first.
//
// Multi-node TensorRT-LLM leaders start their MPI ranks with it (render/scripts/kubexec.sh). The leader runs the
// tenant's image with the launcher ServiceAccount's token; `kubectl exec` GETs the pod before it connects, so that
// token needed `get` on every pod of the namespace. This client opens the exec stream directly, so the launcher
// role holds only `pods/exec` (render/multinode.py LAUNCHER_RULES), which the exec admission policy narrows to the
// leader's own workers.
//
// Protocol: a WebSocket upgrade of GET .../pods/NAME/exec (kube-apiserver 1.30 and later; kubectl 1.30+ does the
// same, client-go tools/remotecommand/websocket.go) with the channel subprotocols v5/v4.channel.k8s.io: every
// binary message starts with a channel byte (1 stdout, 2 stderr, 3 the final metav1.Status), the command's exit
// code arrives as a Status of reason NonZeroExitCode with an ExitCode cause. No stdin and no TTY: MPI's rsh agent
// needs neither (kubexec.sh ran `kubectl exec` without -i).
//
// Exit status: the command's own; 255 (as ssh) when the exec could not run, with the API server's reason on
// stderr.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	failedToRun       = 255

	channelStdout = 1
	channelStderr = 2
	channelStatus = 3

	// The heartbeat of client-go's WebSocket executor: a ping every 5 s, the connection given up after 12 missed
	// pongs; a leader whose API server vanished ends its exec instead of hanging (and mpirun sees the rank lost).
	pingPeriod   = 5 * time.Second
	readDeadline = 12*pingPeriod + time.Second
	writeTimeout = 10 * time.Second
	// A refused exec's Status, or the exit Status, is short; a body larger than this is not read further.
	maxErrorBody = 64 << 10
	// One WebSocket message: the API server sends output in chunks of at most 32 KiB (client-go's buffer size).
	maxMessage = 1 << 20
)

// The exec subprotocols, newest first (k8s.io/apimachinery/pkg/util/remotecommand/constants.go).
var subprotocols = []string{"v5.channel.k8s.io", "v4.channel.k8s.io"}

type options struct {
	server, tokenFile, caFile string
	namespace, container, pod string
	command                   []string
	handshakeTimeout          time.Duration
}

// status is the part of metav1.Status that exec reports on its status channel.
type status struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Details *struct {
		Causes []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"causes"`
	} `json:"details"`
}

func main() {
	opts, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "llmb-exec: %v\nusage: llmb-exec [-n NAMESPACE] [-c CONTAINER] POD -- COMMAND [ARG...]\n", err)
		os.Exit(2)
	}
	code, err := run(opts, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "llmb-exec: %s/%s: %v\n", opts.namespace, opts.pod, err)
	}
	os.Exit(code)
}

func parseArgs(args []string) (*options, error) {
	fs := flag.NewFlagSet("llmb-exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := &options{}
	fs.StringVar(&o.namespace, "n", "", "namespace of the pod (default: the ServiceAccount's own namespace)")
	fs.StringVar(&o.container, "c", "", "container (default: the pod's only or default container)")
	fs.StringVar(&o.server, "server", "", "API server URL (default: in-cluster, KUBERNETES_SERVICE_HOST/PORT)")
	fs.StringVar(&o.tokenFile, "token-file", serviceAccountDir+"/token", "bearer token file (read at each run)")
	fs.StringVar(&o.caFile, "ca-file", serviceAccountDir+"/ca.crt", "CA bundle of the API server")
	fs.DurationVar(&o.handshakeTimeout, "connect-timeout", 30*time.Second, "bound on connecting and the upgrade")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if len(rest) < 3 || rest[1] != "--" {
		return nil, errors.New("want POD -- COMMAND")
	}
	o.pod, o.command = rest[0], rest[2:]
	if o.server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("not in a pod (KUBERNETES_SERVICE_HOST/PORT unset) and no --server")
		}
		o.server = "https://" + net.JoinHostPort(host, port)
	}
	if o.namespace == "" {
		data, err := os.ReadFile(serviceAccountDir + "/namespace")
		if err != nil {
			return nil, fmt.Errorf("no -n and no ServiceAccount namespace: %w", err)
		}
		o.namespace = strings.TrimSpace(string(data))
	}
	return o, nil
}

// execURL is the WebSocket URL of the pod's exec subresource (what `kubectl exec` connects to).
func execURL(o *options) (string, error) {
	base, err := url.Parse(o.server)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return "", fmt.Errorf("bad --server %q", o.server)
	}
	query := url.Values{"stdout": {"true"}, "stderr": {"true"}}
	if o.container != "" {
		query.Set("container", o.container)
	}
	for _, word := range o.command {
		query.Add("command", word)
	}
	u := *base
	u.Scheme = map[string]string{"https": "wss", "http": "ws"}[base.Scheme]
	// Escaped segments: a pod or namespace name with a slash cannot reach another path.
	prefix := strings.TrimSuffix(base.EscapedPath(), "/") + "/api/v1/namespaces/"
	u.RawPath = prefix + url.PathEscape(o.namespace) + "/pods/" + url.PathEscape(o.pod) + "/exec"
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return "", err
	}
	u.RawQuery = query.Encode()
	return u.String(), nil
}

func dialer(o *options) (*websocket.Dialer, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if pem, err := os.ReadFile(o.caFile); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", o.caFile)
		}
		config.RootCAs = pool
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	} // no CA file: the system roots
	return &websocket.Dialer{
		Proxy: nil, TLSClientConfig: config, HandshakeTimeout: o.handshakeTimeout, Subprotocols: subprotocols,
		ReadBufferSize: 32 << 10, WriteBufferSize: 4 << 10,
	}, nil
}

// run connects, copies stdout and stderr until the command ends and returns its exit code.
func run(o *options, stdout, stderr io.Writer) (int, error) {
	target, err := execURL(o)
	if err != nil {
		return failedToRun, err
	}
	token, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return failedToRun, fmt.Errorf("read token: %w", err)
	}
	d, err := dialer(o)
	if err != nil {
		return failedToRun, err
	}
	header := http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(token))}}
	conn, resp, err := d.Dial(target, header)
	if err != nil {
		return failedToRun, refusal(err, resp)
	}
	defer conn.Close()
	return stream(conn, stdout, stderr)
}

// refusal says why the upgrade failed: the API server answers a refused exec (authorization, admission, a pod that
// is not there or not running) with a Status, whose message is the useful part.
func refusal(err error, resp *http.Response) error {
	if resp == nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if message := statusMessage(body); message != "" {
		return fmt.Errorf("%s (HTTP %d)", message, resp.StatusCode)
	}
	return fmt.Errorf("%s (HTTP %d): %s", err, resp.StatusCode, strings.TrimSpace(string(body)))
}

// statusMessage is the message of a Status body. gorilla/websocket keeps only the first 1,024 bytes of a failed
// handshake's body (Dialer.DialContext), which cuts a long Status (an admission refusal with causes) mid-JSON; the
// message comes before the details, so it is read as the first JSON string after its key.
func statusMessage(body []byte) string {
	var s status
	if json.Unmarshal(body, &s) == nil {
		return s.Message
	}
	key := []byte(`"message":`)
	at := bytes.Index(body, key)
	if at < 0 {
		return ""
	}
	var message string
	if json.NewDecoder(bytes.NewReader(body[at+len(key):])).Decode(&message) != nil {
		return ""
	}
	return message
}

func stream(conn *websocket.Conn, stdout, stderr io.Writer) (int, error) {
	var writeMu sync.Mutex // gorilla allows one writer at a time: pings and the close message
	alive := func() error { return conn.SetReadDeadline(time.Now().Add(readDeadline)) }
	if err := alive(); err != nil {
		return failedToRun, err
	}
	conn.SetPongHandler(func(string) error { return alive() })
	done := make(chan struct{})
	defer close(done)
	go func() {
		ticker := time.NewTicker(pingPeriod)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				writeMu.Lock()
				err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout))
				writeMu.Unlock()
				if err != nil {
					return
				}
			}
		}
	}()

	conn.SetReadLimit(maxMessage)
	var final []byte
	for {
		kind, data, err := conn.ReadMessage()
		if err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) || final != nil {
				break
			}
			return failedToRun, fmt.Errorf("connection lost before the command ended: %w", err)
		}
		_ = alive()
		if kind != websocket.BinaryMessage || len(data) == 0 {
			continue
		}
		switch data[0] {
		case channelStdout:
			_, err = stdout.Write(data[1:])
		case channelStderr:
			_, err = stderr.Write(data[1:])
		case channelStatus:
			if len(final)+len(data)-1 > maxErrorBody {
				return failedToRun, fmt.Errorf("exit status over %d bytes", maxErrorBody)
			}
			final = append(final, data[1:]...)
		}
		if err != nil { // our own stdout or stderr closed: the caller went away
			return failedToRun, err
		}
		// The Status is the last thing the API server sends: once it is whole, the command has ended, whether or not
		// the connection is closed after it (a server that holds it open must not hold the launch).
		if data[0] == channelStatus && json.Valid(final) {
			break
		}
	}
	writeMu.Lock()
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(writeTimeout))
	writeMu.Unlock()
	return exitCode(final)
}

// exitCode reads the final Status: Success is 0, NonZeroExitCode carries the code in its ExitCode cause
// (client-go tools/remotecommand/v4.go errorDecoderV4.decode); anything else failed to run.
func exitCode(final []byte) (int, error) {
	if len(final) == 0 { // v4 and v5 always send a Status; none means the stream was cut
		return failedToRun, errors.New("the connection closed without the command's exit status")
	}
	var s status
	if err := json.Unmarshal(final, &s); err != nil {
		return failedToRun, fmt.Errorf("unreadable exit status %q: %w", final, err)
	}
	if s.Status == "Success" {
		return 0, nil
	}
	if s.Reason == "NonZeroExitCode" && s.Details != nil {
		for _, cause := range s.Details.Causes {
			if cause.Reason == "ExitCode" {
				if code, err := strconv.Atoi(cause.Message); err == nil && code > 0 && code < 256 {
					return code, nil
				}
			}
		}
	}
	return failedToRun, errors.New(s.Message)
}
