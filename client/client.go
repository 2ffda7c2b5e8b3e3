package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
)

// Client is a connection to a graveler server. Every API method is
// available through the embedded generated client.
type Client struct {
	pb.GravelerServiceClient
	conn *grpc.ClientConn
}

type options struct {
	tls        *tls.Config
	tlsErr     error
	token      string
	timeout    time.Duration
	keepalive  keepalive.ClientParameters
	dialOpts   []grpc.DialOption
	maxRecvMsg int
	maxRequest int
}

// Option configures Dial.
type Option func(*options)

// WithTLS uses TLS with cfg. Without a TLS option the connection is plain
// text (for loopback and tests).
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithTLSFiles uses TLS trusting the CA in caFile (empty: the system roots),
// presenting the client certificate certFile/keyFile when both are set (mTLS).
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				o.tlsErr = fmt.Errorf("client: CA file: %w", err)
				return
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				o.tlsErr = fmt.Errorf("client: CA file %s holds no PEM certificate", caFile)
				return
			}
			cfg.RootCAs = pool
		}
		if certFile != "" || keyFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				o.tlsErr = fmt.Errorf("client: client certificate: %w", err)
				return
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		o.tls = cfg
	}
}

// WithToken sends "authorization: Bearer <token>" on every call. It is
// sent over plain-text connections too, so use TLS beyond loopback.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTimeout bounds every unary call whose context has no deadline.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithKeepalive sets client keepalive pings (default: every 30s, 10s
// timeout, also without active calls - within the server's enforcement
// policy, which accepts pings every 10s or slower).
func WithKeepalive(p keepalive.ClientParameters) Option {
	return func(o *options) { o.keepalive = p }
}

// WithMaxRecvMsgSize bounds a response message (default 16 MiB, the server's send limit).
func WithMaxRecvMsgSize(n int) Option { return func(o *options) { o.maxRecvMsg = n } }

// WithMaxRequestSize sets the request message size the server accepts
// (default DefaultMaxRequestSize, gravelerd's default; 0 or less: not
// checked by the client). A larger request fails before it is sent, with
// an error that matches ErrMessageTooLarge.
func WithMaxRequestSize(n int) Option { return func(o *options) { o.maxRequest = n } }

// WithDialOptions passes extra gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// ErrNotReady: no connection could be made (it wraps ErrUnavailable).
var ErrNotReady = fmt.Errorf("%w: no connection", ErrUnavailable)

// Dial connects to addr ("host:port") and waits until the connection is
// ready. It gives up at the first failed attempt, with the cause ("connection
// refused", a TLS handshake error, ...), or when ctx ends while an attempt
// is still in progress (an address that does not answer); both errors wrap
// ErrNotReady, the second also ctx.Err(). Once dialed, the connection is
// re-established in the background as gRPC does.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := options{
		keepalive:  keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true},
		maxRecvMsg: 16 << 20,
		maxRequest: DefaultMaxRequestSize,
	}
	for _, f := range opts {
		f(&o)
	}
	if o.tlsErr != nil {
		return nil, o.tlsErr
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	callOpts := []grpc.CallOption{grpc.MaxCallRecvMsgSize(o.maxRecvMsg)}
	if o.maxRequest > 0 {
		callOpts = append(callOpts, grpc.MaxCallSendMsgSize(o.maxRequest))
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(o.keepalive),
		grpc.WithDefaultCallOptions(callOpts...),
		grpc.WithChainUnaryInterceptor(unaryInterceptor(o.timeout, o.maxRequest)),
		grpc.WithChainStreamInterceptor(streamInterceptor),
	}
	if o.token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	dopts = append(dopts, o.dialOpts...)
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := waitReady(ctx, conn, addr); err != nil {
		conn.Close()
		return nil, err
	}
	return &Client{GravelerServiceClient: pb.NewGravelerServiceClient(conn), conn: conn}, nil
}

// waitReady waits for conn to become ready, and returns the cause of the
// first failed attempt instead of waiting through gRPC's reconnect backoff.
func waitReady(ctx context.Context, conn *grpc.ClientConn, addr string) error {
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			// gRPC keeps the last connection error only for fail-fast
			// calls, which fail at once in this state with it as their
			// message; the call is never sent.
			err := conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
			st, _ := status.FromError(err)
			switch {
			case err != nil && st.Code() == codes.Unavailable:
				return fmt.Errorf("%w to %s: %s", ErrNotReady, addr, connectionCause(st.Message()))
			case ctx.Err() != nil:
				return fmt.Errorf("%w to %s: %w (still %s)", ErrNotReady, addr, ctx.Err(), s)
			}
			// The call reached a server after all: it reconnected meanwhile.
			return nil
		case connectivity.Shutdown:
			return fmt.Errorf("%w to %s: connection closed", ErrNotReady, addr)
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("%w to %s: %w (still %s)", ErrNotReady, addr, ctx.Err(), s)
		}
	}
}

// connectionCause strips gRPC's wrapping from a connection error message:
// `connection error: desc = "transport: ..."` becomes `transport: ...`.
func connectionCause(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "connection error: desc = "); ok {
		if u, err := strconv.Unquote(rest); err == nil {
			return u
		}
	}
	return msg
}

// Conn returns the underlying connection, e.g. for the health service.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("client: close: %w", err)
	}
	return nil
}

func unaryInterceptor(timeout time.Duration, maxRequest int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := checkRequest(req, maxRequest); err != nil {
			return err
		}
		if _, has := ctx.Deadline(); !has && timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return fromStatus(invoker(ctx, method, req, reply, cc, opts...))
	}
}

func streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, fromStatus(err)
	}
	return &errStream{ClientStream: s}, nil
}

// errStream converts the status errors of a stream into *Error.
type errStream struct{ grpc.ClientStream }

func (s *errStream) RecvMsg(m any) error { return fromStatus(s.ClientStream.RecvMsg(m)) }
func (s *errStream) SendMsg(m any) error { return fromStatus(s.ClientStream.SendMsg(m)) }
func (s *errStream) CloseSend() error    { return fromStatus(s.ClientStream.CloseSend()) }
