package tlstest

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// gateway is what Temporal Cloud looks like from a client, on loopback: a
// gRPC endpoint that speaks only TLS, demands a client certificate signed
// by its CA and an API key, and forwards every call unchanged, as raw
// frames, to the plain dev server behind it. It records each call's
// method, API key and client certificate as they arrived, so a test sees
// what the SDK really sent.
type gateway struct {
	Addr    string
	keys    map[string]bool // accepted "Bearer <key>" values
	backend *grpc.ClientConn

	mu    sync.Mutex
	calls []call
}

// call is one RPC as the gateway saw it.
type call struct {
	Method        string // short name: PollActivityTaskQueue
	Authorization string // the authorization header, as sent
	ClientCN      string // common name of the client certificate
}

// startGateway listens on 127.0.0.1 with serverCert, requires client
// certificates signed by clients, accepts the API keys given and forwards
// to backend.
func startGateway(t *testing.T, backend string, serverCert tls.Certificate, clients *authority, keys ...string) *gateway {
	t.Helper()
	conn, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(128<<20), grpc.MaxCallSendMsgSize(128<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g := &gateway{keys: map[string]bool{}, backend: conn}
	for _, k := range keys {
		g.keys["Bearer "+k] = true
	}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clients.pool(),
		MinVersion:   tls.VersionTLS12,
	})
	srv := grpc.NewServer(grpc.Creds(creds),
		grpc.UnknownServiceHandler(g.forward),
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.MaxRecvMsgSize(128<<20), grpc.MaxSendMsgSize(128<<20),
		// The SDK pings every 30s, idle or not, as Temporal's server allows.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.Addr = l.Addr().String()
	go srv.Serve(l) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return g
}

// forward relays one call, whatever its service, to the backend.
func (g *gateway) forward(_ any, in grpc.ServerStream) error {
	ctx := in.Context()
	method, _ := grpc.MethodFromServerStream(in)
	md, _ := metadata.FromIncomingContext(ctx)
	c := call{Method: method[strings.LastIndex(method, "/")+1:]}
	if v := md.Get("authorization"); len(v) > 0 {
		c.Authorization = v[0]
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			c.ClientCN = info.State.PeerCertificates[0].Subject.CommonName
		}
	}
	g.mu.Lock()
	g.calls = append(g.calls, c)
	g.mu.Unlock()
	if !g.keys[c.Authorization] {
		return status.Error(codes.Unauthenticated, "gateway: missing or unknown API key")
	}

	out := md.Copy()
	for _, k := range []string{":authority", "content-type", "user-agent", "te", "grpc-timeout", "grpc-accept-encoding"} {
		out.Delete(k)
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, out))
	defer cancel()
	back, err := g.backend.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	go func() {
		for {
			var frame []byte
			if err := in.RecvMsg(&frame); err != nil {
				if errors.Is(err, io.EOF) {
					_ = back.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := back.SendMsg(&frame); err != nil {
				return // RecvMsg below reports why
			}
		}
	}()
	if h, err := back.Header(); err == nil {
		if err := in.SendHeader(h); err != nil {
			return err
		}
	}
	for {
		var frame []byte
		if err := back.RecvMsg(&frame); err != nil {
			in.SetTrailer(back.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // the backend's status, details and all
		}
		if err := in.SendMsg(&frame); err != nil {
			return err
		}
	}
}

// Calls is what the gateway has seen so far.
func (g *gateway) Calls() []call {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]call(nil), g.calls...)
}

// Saw says whether some call of method carried authorization and came with
// the client certificate named cn.
func (g *gateway) Saw(method, authorization, cn string) bool {
	for _, c := range g.Calls() {
		if c.Method == method && c.Authorization == authorization && c.ClientCN == cn {
			return true
		}
	}
	return false
}

// rawCodec passes messages through as the bytes on the wire: the gateway
// never decodes what it forwards.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
