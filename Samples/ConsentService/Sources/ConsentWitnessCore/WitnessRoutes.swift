import Dispatch
import Hummingbird
import LogWitness
import Logging
import TransparencyLog

/// The witness's HTTP face (C2SP `tlog-witness`): `POST /add-checkpoint`, answered by
/// ``Witness`` with the spec's status codes; `GET /` names the witness and its key.
public func makeWitnessApplication(witness: Witness, host: String = "127.0.0.1", port: Int, logger: Logger) -> some ApplicationProtocol {
    Application(router: witnessRouter(witness: witness, logger: logger), configuration: .init(address: .hostname(host, port: port), serverName: "consent-witness"), logger: logger)
}

func witnessRouter(witness: Witness, logger: Logger) -> Router<BasicRequestContext> {
    let router = Router()
    router.post("/add-checkpoint") { request, _ -> Response in
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: AddCheckpointRequest.maximumBytes)
        } catch {
            return plain(.badRequest, "the request is larger than \(AddCheckpointRequest.maximumBytes) bytes\n")
        }
        let bytes = Array(body.readableBytesView)
        // Recording is a synced file write: off the event loop.
        let answer = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: witness.addCheckpoint(bytes)) }
        }
        if let problem = answer.problem {
            logger.error("add-checkpoint failed", metadata: ["problem": "\(problem)"])
        } else {
            logger.info("add-checkpoint", metadata: ["status": "\(answer.status)"])
        }
        var headers = HTTPFields()
        headers[.contentType] = answer.contentType
        return Response(status: .init(code: answer.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }
    router.get("/") { _, _ -> Response in
        plain(.ok, "consent-witness \(witness.key.name)\n\(witness.key.text)\n")
    }
    return router
}

private func plain(_ status: HTTPResponse.Status, _ text: String) -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "text/plain; charset=utf-8"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
}
