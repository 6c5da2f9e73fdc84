-- Plants, in schema public, a function for every signature that could shadow a pg_catalog
-- function or operator siwa-notify's SQL calls (the names in the settings plant.functions and
-- plant.operators, space-separated, from scripts/sql-calls). Each planted body reports that it
-- ran (public.planted_hit: a WARNING in the server log, and the sequence public.planted_hits,
-- which no rollback undoes) and returns NULL. Run by a role that may create in public.
CREATE SEQUENCE public.planted_hits;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE public.planted_hits TO PUBLIC;
CREATE FUNCTION public.planted_hit(name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.nextval('public.planted_hits');
    RAISE WARNING 'planted % ran as % in: %', name, current_user, pg_catalog.current_query();
END
$$;
CREATE FUNCTION public.planted_step(state anyelement, value anyelement) RETURNS anyelement LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public.planted_hit('aggregate');
    RETURN state;
END
$$;
DO $plant$
DECLARE
    candidates text[] := ARRAY['text', 'bigint', 'integer', 'smallint', 'numeric', 'double precision', 'real',
                               'timestamptz', 'timestamp', 'date', 'interval', 'jsonb', 'json', 'boolean', 'bytea',
                               'text[]', 'bigint[]', 'name', 'oid', 'regclass', 'uuid', 'character varying', 'character'];
    -- The types siwa's columns, parameters and literals have: pairs of them for two-argument
    -- functions and for operators.
    common text[] := ARRAY['text', 'bigint', 'integer', 'numeric', 'double precision', 'timestamptz', 'interval',
                           'jsonb', 'boolean', 'text[]'];
    pseudo text[] := ARRAY['any', 'anyelement', 'anyarray', 'anynonarray', 'anyenum', 'anyrange', 'anycompatible',
                           'anycompatiblearray', 'anycompatiblenonarray', 'anycompatiblerange', 'anymultirange',
                           'anycompatiblemultirange', '"any"', 'internal', 'cstring', 'record'];
    f record;
    signatures text[];
    args text[];
    sig text;
    ret text;
    op text;
    l text;
    r text;
    i int;
    k int := 0;
    foreign_types text[];
BEGIN
    FOR f IN
        SELECT DISTINCT p.proname, p.prokind, p.proretset, p.prorettype::regtype::text AS ret,
               (SELECT pg_catalog.array_agg(t::regtype::text ORDER BY o) FROM pg_catalog.unnest(p.proargtypes) WITH ORDINALITY AS a(t, o)) AS args
        FROM pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace
          AND p.proname = ANY (pg_catalog.string_to_array(pg_catalog.btrim(pg_catalog.current_setting('plant.functions')), ' '))
          AND p.pronargs BETWEEN 1 AND 4 AND p.prokind IN ('f', 'a')
    LOOP
        -- Each position over every candidate type, the others kept (a pseudo-type made text);
        -- with two arguments, every pair.
        signatures := '{}';
        args := ARRAY(SELECT CASE WHEN t = ANY (pseudo) THEN 'text' ELSE t END FROM pg_catalog.unnest(f.args) t);
        FOR i IN 1 .. pg_catalog.array_length(args, 1) LOOP
            FOREACH l IN ARRAY candidates LOOP
                signatures := signatures || pg_catalog.array_to_string(args[1:i-1] || l || args[i+1:], ', ');
            END LOOP;
        END LOOP;
        IF pg_catalog.array_length(args, 1) = 2 THEN
            FOREACH l IN ARRAY common LOOP
                FOREACH r IN ARRAY common LOOP
                    signatures := signatures || (l || ', ' || r);
                END LOOP;
            END LOOP;
        END IF;
        ret := CASE WHEN f.ret = ANY (pseudo) OR f.ret IN ('void', 'trigger') THEN 'text' ELSE f.ret END;
        IF f.ret = 'record' THEN ret := 'record'; END IF;
        IF f.ret = 'void' THEN ret := 'void'; END IF;
        FOREACH sig IN ARRAY ARRAY(SELECT DISTINCT s FROM pg_catalog.unnest(signatures) s) LOOP
            BEGIN
                IF f.prokind = 'a' THEN
                    IF sig NOT LIKE '%,%' THEN
                        EXECUTE pg_catalog.format('CREATE AGGREGATE public.%I(%s) (SFUNC = public.planted_step, STYPE = %s)',
                                                  f.proname, sig, sig);
                        k := k + 1;
                    END IF;
                ELSE
                    EXECUTE pg_catalog.format(
                        'CREATE FUNCTION public.%I(%s) RETURNS %s%s LANGUAGE plpgsql AS $b$ BEGIN PERFORM public.planted_hit(%L); RETURN%s; END $b$',
                        f.proname, sig, CASE WHEN f.proretset THEN 'SETOF ' ELSE '' END, ret, f.proname,
                        CASE WHEN f.proretset OR ret = 'void' THEN '' ELSE ' NULL' END);
                    k := k + 1;
                END IF;
            EXCEPTION WHEN duplicate_function OR invalid_function_definition OR undefined_object
                      OR datatype_mismatch OR wrong_object_type OR invalid_parameter_value THEN
                NULL;
            END;
        END LOOP;
    END LOOP;
    -- Operators: every pair of candidate types for each symbol.
    FOREACH op IN ARRAY pg_catalog.string_to_array(pg_catalog.btrim(pg_catalog.current_setting('plant.operators')), ' ') LOOP
        FOREACH l IN ARRAY common LOOP
            FOREACH r IN ARRAY common LOOP
                ret := CASE WHEN op IN ('=', '<>', '<', '>', '<=', '>=', '?', '@>', '<@') THEN 'boolean'
                            WHEN op IN ('->', '#>') THEN 'jsonb'
                            WHEN op IN ('->>', '#>>', '||') THEN 'text'
                            ELSE l END;
                sig := pg_catalog.format('planted_op_%s', k);
                BEGIN
                    EXECUTE pg_catalog.format(
                        'CREATE FUNCTION public.%I(%s, %s) RETURNS %s LANGUAGE plpgsql AS $b$ BEGIN PERFORM public.planted_hit(%L); RETURN NULL; END $b$',
                        sig, l, r, ret, 'operator ' || op);
                    EXECUTE pg_catalog.format('CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = public.%I)', op, l, r, sig);
                    k := k + 1;
                EXCEPTION WHEN duplicate_function OR duplicate_object OR invalid_function_definition OR undefined_object
                          OR datatype_mismatch OR wrong_object_type OR invalid_parameter_value THEN
                    NULL;
                END;
            END LOOP;
        END LOOP;
    END LOOP;
    -- Operators on the column types of tables siwa-notify does not own (Auth.js's VARCHAR(255),
    -- Supabase's varchar and uuid, citext where the extension is installed) and mixed pairs:
    -- pg_catalog has no `=(varchar, varchar)` nor `=(varchar, text)`, so a planted one is an exact
    -- match that wins over the built-in comparison through an implicit cast.
    foreign_types := ARRAY['character varying', 'character', 'uuid', 'name'];
    IF pg_catalog.to_regtype('citext') IS NOT NULL THEN
        foreign_types := foreign_types || 'citext'::text;
    END IF;
    FOREACH op IN ARRAY ARRAY(SELECT DISTINCT o FROM pg_catalog.unnest(
            ARRAY['=', '<>', '<', '>', '<=', '>=', '~~', '!~~', '~~*', '!~~*']
            || pg_catalog.string_to_array(pg_catalog.btrim(pg_catalog.current_setting('plant.operators')), ' ')) o) LOOP
        FOREACH l IN ARRAY foreign_types || common LOOP
            FOREACH r IN ARRAY foreign_types || common LOOP
                CONTINUE WHEN NOT (l = ANY (foreign_types) OR r = ANY (foreign_types));
                ret := CASE WHEN op IN ('=', '<>', '<', '>', '<=', '>=', '?', '@>', '<@', '~~', '!~~', '~~*', '!~~*') THEN 'boolean'
                            WHEN op IN ('->', '#>') THEN 'jsonb'
                            WHEN op IN ('->>', '#>>', '||') THEN 'text'
                            ELSE l END;
                sig := pg_catalog.format('planted_op_%s', k);
                BEGIN
                    EXECUTE pg_catalog.format(
                        'CREATE FUNCTION public.%I(%s, %s) RETURNS %s LANGUAGE plpgsql AS $b$ BEGIN PERFORM public.planted_hit(%L); RETURN NULL; END $b$',
                        sig, l, r, ret, 'operator ' || op || ' (' || l || ', ' || r || ')');
                    EXECUTE pg_catalog.format('CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = public.%I)', op, l, r, sig);
                    k := k + 1;
                EXCEPTION WHEN duplicate_function OR duplicate_object OR invalid_function_definition OR undefined_object
                          OR datatype_mismatch OR wrong_object_type OR invalid_parameter_value THEN
                    NULL;
                END;
            END LOOP;
        END LOOP;
    END LOOP;
    RAISE NOTICE 'planted % shadows', k;
END
$plant$;
