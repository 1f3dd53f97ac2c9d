-- Whose `sending` mark a reply part carries: the lease token of the job that marked it. A
-- commit whose acknowledgement was lost (a database crash between its flush and its reply)
-- can leave part 0 `sending` although no request left; the holder that wrote it recognises
-- its own token when it reads the part again and sends it, where any other reader (a new
-- holder after the lease ran out) treats the part as in doubt, as before. Null for parts
-- marked before this column and for parts not marked.
ALTER TABLE channel_replies ADD COLUMN sending_lease uuid;
