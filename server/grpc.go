package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "graveler/api/graveler/v1"
)

// RequestIDHeader carries the request id, in and out.
const RequestIDHeader = "x-request-id"

var (
	requestsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_grpc_requests_total",
		Help: "gRPC requests handled, by method and status code.",
	}, []string{"method", "code"})
	requestSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "graveler_grpc_request_duration_seconds",
		Help:    "gRPC request latency, by method.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"method"})
)

// GRPCOptions shape the gRPC server. Zero values take the defaults noted.
type GRPCOptions struct {
	// TLS, when set, serves TLS (set ClientCAs and ClientAuth for mTLS).
	TLS *tls.Config
	// Tokens, when set, requires "authorization: Bearer <token>" on every
	// call except the health service.
	Tokens *Tokens
	// MaxRecvMsgSize bounds a request message (default 4 MiB).
	MaxRecvMsgSize int
	// MaxSendMsgSize bounds a response message (default 16 MiB).
	MaxSendMsgSize int
	// DefaultTimeout bounds unary calls that carry no deadline (0: none).
	DefaultTimeout time.Duration
	// Keepalive and KeepalivePolicy are set together so that the pings the
	// server sends and those it accepts agree (defaults: ping an idle
	// connection every 2m, drop it after 20s without an answer; accept
	// client pings every 10s or slower, also without active calls).
	Keepalive       keepalive.ServerParameters
	KeepalivePolicy keepalive.EnforcementPolicy
	// Logger receives the access log (default: no logs); AccessLog
	// chooses which calls it gets.
	Logger *zap.Logger
	// AccessLog chooses the calls logged (default AccessLogSampled).
	// Health checks are never logged, whatever the mode.
	AccessLog AccessLog
	// AccessLogSampleEvery: in AccessLogSampled, one in this many calls
	// that are neither failed nor slow is logged (default 100).
	AccessLogSampleEvery int
	// SlowCallThreshold: a unary call that takes longer is logged at warn
	// in AccessLogSampled and AccessLogAll (default 1s; negative: no call
	// counts as slow). Streams are long-lived by design and never count.
	SlowCallThreshold time.Duration
	// StreamWorkers is how many goroutines the server keeps to run calls
	// on (default 64; negative: none, a new goroutine for every call, as
	// gRPC does by default). A kept goroutine has the stack a handler
	// grew before, so a call does not grow a fresh one (copying it as it
	// goes); calls beyond the workers busy still get a goroutine each.
	StreamWorkers int
}

// AccessLog chooses which calls the gRPC server logs. It is a flag.Value.
type AccessLog int

const (
	// AccessLogSampled logs every failed call, every slow call, and one in
	// GRPCOptions.AccessLogSampleEvery of the others, so that the log shows
	// the traffic without a line per call.
	AccessLogSampled AccessLog = iota
	// AccessLogAll logs every call.
	AccessLogAll
	// AccessLogOff logs only the calls that failed on the server's side
	// (see serverFault): their cause is in no other place, since a client
	// sees only the request id.
	AccessLogOff
)

var accessLogNames = [...]string{AccessLogSampled: "sampled", AccessLogAll: "all", AccessLogOff: "off"}

func (a AccessLog) String() string {
	if a < 0 || int(a) >= len(accessLogNames) {
		return fmt.Sprintf("AccessLog(%d)", int(a))
	}
	return accessLogNames[a]
}

// Set parses "off", "sampled" or "all".
func (a *AccessLog) Set(s string) error {
	for i, n := range accessLogNames {
		if strings.EqualFold(s, n) {
			*a = AccessLog(i)
			return nil
		}
	}
	return fmt.Errorf("access log mode %q: want off, sampled or all", s)
}

// healthPrefix is the health service's method prefix: probes arrive every
// few seconds from every load balancer and kubelet, so they are never
// logged and need no token.
const healthPrefix = "/grpc.health.v1.Health/"

// serverFault reports whether a call that ended with c failed on the
// server's side (a bug, or the metadata store unreachable, slow or full)
// rather than because of what the client asked.
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Internal, codes.Unknown, codes.DataLoss,
		codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}

// defaultStreamWorkers is GRPCOptions.StreamWorkers' default: as many as
// the concurrent calls of a busy client pool, so that most calls find one.
const defaultStreamWorkers = 64

// GRPC is a configured gRPC server with its health service.
type GRPC struct {
	Server *grpc.Server
	Health *health.Server
}

// NewGRPCServer registers srv, the health service (NOT_SERVING until
// RunHealth or SetServing says otherwise) and reflection on a new
// grpc.Server with the interceptors described in the package doc.
func NewGRPCServer(srv *Server, o GRPCOptions) *GRPC {
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = 4 << 20
	}
	if o.MaxSendMsgSize <= 0 {
		o.MaxSendMsgSize = 16 << 20
	}
	if o.Keepalive == (keepalive.ServerParameters{}) {
		o.Keepalive = keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}
	}
	if o.KeepalivePolicy == (keepalive.EnforcementPolicy{}) {
		o.KeepalivePolicy = keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.AccessLogSampleEvery <= 0 {
		o.AccessLogSampleEvery = 100
	}
	if o.SlowCallThreshold == 0 {
		o.SlowCallThreshold = time.Second
	}
	if o.StreamWorkers == 0 {
		o.StreamWorkers = defaultStreamWorkers
	}
	ob := &observer{log: o.Logger, tokens: o.Tokens, timeout: o.DefaultTimeout,
		mode: o.AccessLog, every: uint64(o.AccessLogSampleEvery), slow: o.SlowCallThreshold}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.MaxRecvMsgSize),
		grpc.MaxSendMsgSize(o.MaxSendMsgSize),
		grpc.KeepaliveParams(o.Keepalive),
		grpc.KeepaliveEnforcementPolicy(o.KeepalivePolicy),
		grpc.UnaryInterceptor(ob.unary),
		grpc.StreamInterceptor(ob.stream),
		grpc.ForceServerCodecV2(newServerCodec()),
	}
	if o.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(o.StreamWorkers)))
	}
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	gs := grpc.NewServer(opts...)
	reg := decodingRegistrar{gs}
	pb.RegisterGravelerServiceServer(reg, srv)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(pb.GravelerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(reg, hs)
	reflection.Register(reg)
	// Every service is registered and none is served yet.
	ob.bindMethods(gs)
	return &GRPC{Server: gs, Health: hs}
}

// SetServing sets the health of the server and of the Graveler service.
func (g *GRPC) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.Health.SetServingStatus("", st)
	g.Health.SetServingStatus(pb.GravelerService_ServiceDesc.ServiceName, st)
}

// RunHealth probes the metadata store every interval and reports SERVING
// only while probe succeeds. It returns when ctx ends, leaving the status
// as it was (the caller sets NOT_SERVING when it starts to drain).
func (g *GRPC) RunHealth(ctx context.Context, probe func(context.Context) error, interval, timeout time.Duration, log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	last := true
	check := func() {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		ok := err == nil
		if ok != last {
			if ok {
				log.Info("metadata store reachable: serving")
			} else {
				log.Warn("metadata store unreachable: not serving", zap.Error(err))
			}
		}
		last = ok
		g.SetServing(ok)
	}
	check()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}

type observer struct {
	log     *zap.Logger
	tokens  *Tokens
	timeout time.Duration
	mode    AccessLog
	every   uint64
	slow    time.Duration // negative: off
	// calls counts the calls that sampling may pass over.
	calls atomic.Uint64
	// methods holds the metric series of every registered method, by full
	// method name; read-only once the server is built.
	methods map[string]*methodMetrics
}

// methodMetrics are one method's series, bound once: WithLabelValues
// hashes its label values and looks the series up on every call. The
// counter of a code is bound at its first use, so that /metrics shows the
// same series as when each call looked its own up.
type methodMetrics struct {
	short   string
	seconds prometheus.Observer
	codes   [maxCode + 1]atomic.Pointer[prometheus.Counter]
}

// maxCode is the highest gRPC status code (codes.Unauthenticated).
const maxCode = codes.Unauthenticated

func newMethodMetrics(method string) *methodMetrics {
	short := method[strings.LastIndexByte(method, '/')+1:]
	return &methodMetrics{short: short, seconds: requestSeconds.WithLabelValues(short)}
}

func (m *methodMetrics) counter(c codes.Code) prometheus.Counter {
	if c > maxCode {
		return requestsTotal.WithLabelValues(m.short, c.String())
	}
	if p := m.codes[c].Load(); p != nil {
		return *p
	}
	ctr := requestsTotal.WithLabelValues(m.short, c.String())
	m.codes[c].Store(&ctr)
	return ctr
}

// bindMethods binds the series of every method gs serves.
func (o *observer) bindMethods(gs *grpc.Server) {
	o.methods = map[string]*methodMetrics{}
	for svc, info := range gs.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + svc + "/" + m.Name
			o.methods[full] = newMethodMetrics(full)
		}
	}
}

// record counts a call that ended with c and took d.
func (o *observer) record(method string, c codes.Code, d time.Duration) {
	m := o.methods[method]
	if m == nil {
		short := method[strings.LastIndexByte(method, '/')+1:]
		requestsTotal.WithLabelValues(short, c.String()).Inc()
		requestSeconds.WithLabelValues(short).Observe(d.Seconds())
		return
	}
	m.counter(c).Inc()
	m.seconds.Observe(d.Seconds())
}

type requestIDKey struct{}

// RequestID returns the id of the request ctx belongs to.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestID takes the caller's id when it is short and printable, so that a
// client's logs and the server's line up; otherwise it makes one.
// ValueFromIncomingContext, unlike FromIncomingContext, copies no more
// than the one header.
func requestID(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDHeader); len(v) == 1 && len(v[0]) <= 64 && v[0] != "" {
		ok := true
		for i := 0; i < len(v[0]); i++ {
			if c := v[0][i]; c < 0x21 || c > 0x7e {
				ok = false
				break
			}
		}
		if ok {
			return v[0]
		}
	}
	return newRequestID()
}

func (o *observer) authenticate(ctx context.Context, method string) (string, error) {
	if o.tokens == nil || strings.HasPrefix(method, healthPrefix) {
		return "", nil
	}
	v := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(v) != 1 {
		return "", fmt.Errorf("%w: missing authorization: Bearer <token>", ErrUnauthenticated)
	}
	scheme, tok, ok := strings.Cut(v[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: authorization is not a bearer token", ErrUnauthenticated)
	}
	label, ok := o.tokens.Lookup(strings.TrimSpace(tok))
	if !ok {
		return "", fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	}
	return label, nil
}

// call runs f, turning a panic into an INTERNAL error.
func call(f func() error) (err error) {
	defer recoverHandler(&err)
	return f()
}

// callUnary is call for a unary handler, without a closure to allocate.
func callUnary(ctx context.Context, req any, handler grpc.UnaryHandler) (resp any, err error) {
	defer recoverHandler(&err)
	return handler(ctx, req)
}

func recoverHandler(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("server: panic in handler: %v", r)
	}
}

// finish converts err into a status, logs the request as o.mode says and
// records metrics. req is the request (or a stream's first message): the
// repository it names is only looked up for a call that is logged.
func (o *observer) finish(method string, req any, rid, principal string, unary bool, start time.Time, err error) error {
	st := ToStatus(err, rid)
	c := codes.OK
	if st != nil {
		c = st.Code()
	}
	d := time.Since(start)
	o.record(method, c, d)
	slow := unary && o.slow > 0 && d > o.slow
	var sampled bool
	switch {
	case strings.HasPrefix(method, healthPrefix):
		return st.Err()
	case o.mode == AccessLogOff && !serverFault(c):
		return st.Err()
	case o.mode == AccessLogSampled && c == codes.OK && !slow:
		if (o.calls.Add(1)-1)%o.every != 0 {
			return st.Err()
		}
		sampled = o.every > 1
	}
	fields := []zap.Field{
		zap.String("method", method), zap.String("repository", repositoryOf(req)),
		zap.String("code", c.String()), zap.Duration("duration", d), zap.String("request_id", rid),
	}
	if principal != "" {
		fields = append(fields, zap.String("principal", principal))
	}
	if sampled {
		// This line stands for about this many calls like it.
		fields = append(fields, zap.Uint64("sampled_one_in", o.every))
	}
	switch {
	case c == codes.Internal || c == codes.Unknown || c == codes.DataLoss:
		o.log.Error("request", append(fields, zap.Error(err))...)
	case serverFault(c):
		o.log.Warn("request", append(fields, zap.String("error", st.Message()))...)
	case c != codes.OK:
		o.log.Info("request", append(fields, zap.String("error", st.Message()))...)
	case slow:
		o.log.Warn("slow request", append(fields, zap.Duration("threshold", o.slow))...)
	default:
		o.log.Info("request", fields...)
	}
	return st.Err()
}

func (o *observer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	rid := requestID(ctx)
	ctx = context.WithValue(ctx, requestIDKey{}, rid)
	_ = grpc.SetHeader(ctx, metadata.MD{RequestIDHeader: []string{rid}})
	var resp any
	principal, err := o.authenticate(ctx, info.FullMethod)
	if err == nil {
		ctx = withPrincipal(ctx, principal)
		if _, has := ctx.Deadline(); !has && o.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.timeout)
			defer cancel()
		}
		resp, err = callUnary(ctx, req, handler)
	}
	return resp, o.finish(info.FullMethod, req, rid, principal, true, start, err)
}

// observedStream carries the request id in its context and remembers the
// first message received, to log the repository it names.
type observedStream struct {
	grpc.ServerStream
	ctx   context.Context
	first proto.Message
}

func (s *observedStream) Context() context.Context { return s.ctx }

func (s *observedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.first == nil {
		if t, ok := m.(*decodeTarget); ok {
			m = t.msg
		}
		s.first, _ = m.(proto.Message)
	}
	return err
}

func (o *observer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	rid := requestID(ss.Context())
	_ = ss.SetHeader(metadata.MD{RequestIDHeader: []string{rid}})
	ws := &observedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), requestIDKey{}, rid)}
	principal, err := o.authenticate(ws.ctx, info.FullMethod)
	if err == nil {
		ws.ctx = withPrincipal(ws.ctx, principal)
		err = call(func() error { return handler(srv, ws) })
	}
	return o.finish(info.FullMethod, ws.first, rid, principal, false, start, err)
}

// repositoryOf names the repository a request addresses, for the logs.
func repositoryOf(req any) string {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return ""
	}
	r := m.ProtoReflect()
	if !r.IsValid() {
		return ""
	}
	fields := r.Descriptor().Fields()
	for _, f := range []string{"name", "parent", "repository", "branch", "destination"} {
		fd := fields.ByName(protoreflect.Name(f))
		if fd == nil || fd.Kind().String() != "string" {
			continue
		}
		v := r.Get(fd).String()
		if rest, ok := strings.CutPrefix(v, collRepositories+"/"); ok {
			repo, _, _ := strings.Cut(rest, "/")
			return repo
		}
	}
	if fd := fields.ByName("repository_id"); fd != nil {
		return r.Get(fd).String()
	}
	return ""
}
