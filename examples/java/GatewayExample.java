import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;
import java.util.stream.Stream;

/**
 * tubemq-gateway from Java with only the JDK (java.net.http): publish, consume with commits, stream with
 * Server-Sent Events and resume after a cut, and handle a 4xx. Next to ./scripts/run.sh:
 *
 * <pre>javac -d out GatewayExample.java Json.java && java -cp out GatewayExample</pre>
 *
 * GW (default http://localhost:8080), GW_TOKEN (an API key or JWT, sent as a bearer token) and TOPIC
 * (default demo) change what it talks to.
 */
public final class GatewayExample {
    static final String GW = System.getenv().getOrDefault("GW", "http://localhost:8080");
    static final String TOPIC = System.getenv().getOrDefault("TOPIC", "demo");
    static final String TOKEN = System.getenv("GW_TOKEN");
    // The JDK's default version, HTTP/2: over http:// it offers an h2c upgrade with each new connection's
    // first request, which the gateway declines, serving the request as HTTP/1.1
    static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

    /** An error answer: {"error": {"code", "message", "field", ...}, "requestId"}. */
    static final class GatewayException extends RuntimeException {
        final int status;
        final String code;
        final String field;
        final String requestId;

        GatewayException(int status, Map<String, Object> body) {
            super(status + " " + errorOf(body).get("code") + ": " + errorOf(body).get("message"));
            this.status = status;
            this.code = (String) errorOf(body).get("code");
            this.field = (String) errorOf(body).get("field");
            this.requestId = (String) body.get("requestId");
        }

        @SuppressWarnings("unchecked")
        private static Map<String, Object> errorOf(Map<String, Object> body) {
            return (Map<String, Object>) body.get("error");
        }
    }

    static HttpRequest.Builder request(String url) {
        HttpRequest.Builder builder = HttpRequest.newBuilder(URI.create(url));
        if (TOKEN != null && !TOKEN.isEmpty()) builder.header("Authorization", "Bearer " + TOKEN);
        return builder;
    }

    /** One REST call; 503 and 429 are retried after their Retry-After. Returns the JSON body, or null. */
    static Map<String, Object> call(String method, String url, Object body) throws IOException, InterruptedException {
        HttpRequest.BodyPublisher publisher = body == null
                ? HttpRequest.BodyPublishers.noBody()
                : HttpRequest.BodyPublishers.ofString(Json.write(body));
        HttpRequest request = request(url).timeout(Duration.ofSeconds(30))
                .header("Content-Type", "application/json").method(method, publisher).build();
        for (int attempt = 1; ; attempt++) {
            HttpResponse<String> answer = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
            int status = answer.statusCode();
            if (status == 204) return null;
            Map<String, Object> doc = Json.object(answer.body());
            if (status < 300) return doc;
            if ((status == 503 || status == 429) && attempt < 5) {
                long seconds = answer.headers().firstValueAsLong("Retry-After").orElse(1);
                Thread.sleep(Math.max(seconds, 1) * 1000);
                continue;
            }
            throw new GatewayException(status, doc);
        }
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> list(Object value) {
        return (List<Map<String, Object>>) value;
    }

    public static void main(String[] args) throws Exception {
        String run = "java-" + ProcessHandle.current().pid() + "-" + System.currentTimeMillis();
        List<Object> messages = new ArrayList<>();
        for (int i = 1; i <= 3; i++) messages.add(Map.of("value", "hello " + i, "key", run));

        // 1. publish: 200 = a broker stored every message; messageId is a decimal string
        Map<String, Object> published = call("POST", GW + "/v1/topics/" + TOPIC + "/messages", Map.of("messages", messages));
        List<Object> ids = new ArrayList<>();
        for (Map<String, Object> result : list(published.get("results"))) ids.add(result.get("messageId"));
        System.out.println("published " + ids.size() + ": ids " + ids);

        // 2. consume in a new group from the earliest message, committing what each poll delivered
        Map<String, Object> consumer = call("POST", GW + "/v1/consumers/examples-" + run,
                Map.of("topics", List.of(TOPIC), "startPosition", "earliest"));
        String baseUrl = (String) consumer.get("baseUrl");
        List<String> received = new ArrayList<>();
        try {
            long deadline = System.currentTimeMillis() + 60_000;
            while (received.size() < 3) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("received " + received);
                Map<String, Object> poll = call("GET", baseUrl + "/messages?format=utf8&timeout_ms=5000&max_messages=500", null);
                List<Object> tokens = new ArrayList<>();
                for (Map<String, Object> message : list(poll.get("messages"))) {
                    tokens.add(message.get("token"));
                    if (run.equals(message.get("key"))) received.add((String) message.get("value"));
                }
                if (!tokens.isEmpty()) {
                    Map<String, Object> commit = call("POST", baseUrl + "/commits", Map.of("tokens", tokens));
                    System.out.println("committed " + commit.get("committed") + ", stale " + list(commit.get("stale")).size());
                }
            }
        } finally {
            call("DELETE", baseUrl, null);
        }
        System.out.println("consumed " + received);
        check(received.equals(List.of("hello 1", "hello 2", "hello 3")), "unexpected " + received);

        // 3. Server-Sent Events: cut the stream after our first message, resume with Last-Event-ID
        consumer = call("POST", GW + "/v1/consumers/examples-sse-" + run,
                Map.of("topics", List.of(TOPIC), "startPosition", "earliest"));
        String streamUrl = consumer.get("baseUrl") + "/stream?format=utf8";
        call("POST", GW + "/v1/topics/" + TOPIC + "/messages", Map.of("messages", List.of(
                Map.of("value", "one", "key", run + "-sse"), Map.of("value", "two", "key", run + "-sse"),
                Map.of("value", "three", "key", run + "-sse"))));
        List<String> streamed = new ArrayList<>();
        String last = stream(streamUrl, null, run + "-sse", streamed, got -> got.size() >= 1);
        System.out.println("cut after event " + last);
        if (streamed.size() < 3) stream(streamUrl, last, run + "-sse", streamed, got -> got.size() >= 3);
        System.out.println("streamed " + streamed);
        check(streamed.equals(List.of("one", "two", "three")), "unexpected " + streamed);
        call("DELETE", (String) consumer.get("baseUrl"), null);

        // 4. a 4xx: the error body names the field at fault
        try {
            call("POST", GW + "/v1/topics/" + TOPIC + "/messages",
                    Map.of("messages", List.of(Map.of("value", "x", "encoding", "hex"))));
            throw new IllegalStateException("an invalid encoding was accepted");
        } catch (GatewayException error) {
            check(error.status == 400, "expected 400, got " + error.status);
            System.out.println("400 as expected: " + error.code + " at " + error.field + ": " + error.getMessage()
                    + " (request " + error.requestId + ")");
        }
        System.out.println("java example: OK");
    }

    /**
     * Reads the event stream (after lastEventId when not null) until enough(values) holds, committing every
     * event by its id (the commit token); returns the last event id.
     */
    static String stream(String url, String lastEventId, String key, List<String> values, Predicate<List<String>> enough)
            throws IOException, InterruptedException {
        HttpRequest.Builder builder = request(url).header("Accept", "text/event-stream");
        if (lastEventId != null) builder.header("Last-Event-ID", lastEventId);
        HttpResponse<Stream<String>> answer = HTTP.send(builder.build(), HttpResponse.BodyHandlers.ofLines());
        try (Stream<String> lines = answer.body()) {
            if (answer.statusCode() != 200) {
                throw new GatewayException(answer.statusCode(), Json.object(String.join("\n", lines.toList())));
            }
            long deadline = System.currentTimeMillis() + 60_000;
            String id = lastEventId;
            StringBuilder data = new StringBuilder();
            for (Iterator<String> it = lines.iterator(); it.hasNext() && System.currentTimeMillis() < deadline; ) {
                String line = it.next();
                if (line.startsWith("id:")) id = line.substring(3).strip();
                else if (line.startsWith("data:")) data.append(line.substring(5).strip());
                else if (line.isEmpty() && data.length() > 0) {
                    Map<String, Object> message = Json.object(data.toString());
                    data.setLength(0);
                    if (key.equals(message.get("key"))) values.add((String) message.get("value"));
                    call("POST", url.substring(0, url.indexOf("/stream")) + "/commits", Map.of("tokens", List.of(id)));
                    if (enough.test(values)) return id;
                }
            }
            throw new IllegalStateException("the stream ended or stalled with " + values);
        }
    }

    static void check(boolean condition, String message) {
        if (!condition) throw new IllegalStateException(message);
    }
}
